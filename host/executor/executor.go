// Package executor applies directive turns to the cache index: it validates
// them, applies each turn all or none, records every directive in the audit
// log, and answers with one result per directive.
//
// A turn runs in three steps under the index lock:
//
//  1. Check: the sdk's static validation (directive.ValidateTurn), then a
//     read-only pass over the index: hash lists are resolved,
//     leases are looked up (following the turn's own Pauses and Revokes),
//     tiers must be configured, and tenants must match. Span verbs resolve
//     their session (read from the splicer's Sessions before the lock):
//     Pin and Retain become page verbs, Splice and Evict join their
//     session's splice, and so does a Think purge of an interior transient
//     page (one splice per session through it). Share is refused with
//     not_supported_yet. Any failure ends the turn before anything changed.
//
// Between steps 2 and 3, with the journal still open, each session's
// splice is planned and its fresh device pages reserved; a splice that
// does not fit rolls the turn back. In step 3 the splices are applied
// first (bytes moved by the kernels, new branch committed), then the other
// verbs, plus Retain and Resume. After the lock is released the splicer
// updates the sessions and streams the replacements' fill orders.
//  2. Reversible verbs, in turn order: pins and unpins (Cache, pin_blocks,
//     pin_prefix, ...) and transient marks. Only these can still fail
//     (a pin over budget or quota); the index journals their changes, and
//     on a failure the journal is rolled back (pin counts, TTLs, expiries
//     and transient flags restored exactly) and the turn is refused.
//  3. Commit-only verbs, in turn order: Warm, Pause, RenewLease,
//     RevokeLease, Prune, purge (Think transient=false), evict_descendants.
//     Step 1 made sure they cannot fail, and they cannot be undone (they
//     free pages, or hand copies to the mover), so they run last. A later
//     one finding its blocks already removed by an earlier one counts them
//     as missing.
//
// So within a turn, destructive verbs take effect after the pins and marks,
// whatever their position: a turn that prunes a branch and pins a block
// under it ends with the block gone.
package executor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// Config configures an Executor.
type Config struct {
	// Index is the cache index the directives act on, with the lock the
	// host shares between the executor, the engine service and the
	// splicer. Required.
	Index *guarded.Index
	// Limits bound requests and set the protected sink prefix.
	Limits directive.Limits
	// PinTTL resolves pin TTLs (0 = its default) and clamps them.
	// Zero value: ttl.DefaultPolicy.
	PinTTL ttl.Policy
	// LeaseTTL resolves Pause and RenewLease TTLs; a Pause without a TTL
	// (an indefinite lease) gets LeaseTTL.Max. Zero value: 1 h
	// default, clamped to [1 s, 7 days].
	LeaseTTL ttl.Policy
	// PauseTier is where Pause keeps its copies: Disk by default (the zero
	// value, Device, cannot hold a pause and means Disk), Host, or Remote
	// for leases any worker can resume.
	PauseTier tier.Tier
	// Salt gives the hashing salt of a tenant for pin_prefix/unpin_prefix.
	// Nil: the index's (Index.Salt: the tenant's namespace).
	Salt func(tenant string) blockid.Salt
	// WorkerID is echoed in cache_control replies and checked against the
	// requests' worker_id.
	WorkerID directive.WorkerID
	// Audit receives every directive's record. Nil: no audit log (tests
	// only; the host always configures one).
	Audit AuditLog
	// OnAuditError is told when Audit fails; the turn's result stands.
	OnAuditError func(error)
	// Attachments are the links to the mover and the splicer a host has
	// from the start (its pools open with it); Attach replaces them. Zero:
	// Warm, Resume and the span verbs are refused as unavailable until an
	// Attach.
	Attachments Attachments
	// Now stamps audit records. Nil: time.Now.
	Now func() time.Time
	// DefaultMode is the mode of edits that name none (amortize when
	// empty).
	DefaultMode directive.Mode
}

// DefaultLeaseTTL is the lease policy used when Config.LeaseTTL is zero.
var DefaultLeaseTTL = ttl.Policy{Default: time.Hour, Min: time.Second, Max: 7 * 24 * time.Hour}

// Executor applies turns. It is safe for concurrent use.
type Executor struct {
	cfg Config
	// attached holds the parts that exist only once the pools are open
	// (Config.Attachments, or a later Attach). A turn loads it once
	// (newTurn) and uses that snapshot throughout.
	attached atomic.Pointer[Attachments]
}

// Attachments are the executor's links to the mover and the splicer. A host
// whose pools open when an engine registers attaches them then.
type Attachments struct {
	// Transitions receives the copies Warm and Resume planned, outside the
	// lock; the mover runs them and reports to the index. Nil: Warm and
	// Resume are refused as unavailable, since nothing would carry out the
	// copies.
	Transitions func([]cache.Transition)
	// Free receives the slots freed by Prune, purge and RevokeLease,
	// outside the lock, for the pools to release.
	Free func([]cache.Freed)
	// Splicer executes Splice, Evict and Think purges of interior pages,
	// and resolves the sessions span verbs (Pin, Retain) name. Nil: those
	// verbs are refused as unavailable. It must share the executor's
	// Index.
	Splicer *splice.Splicer
	// Import indexes pages of the shared remote tier that another host
	// stored (its pauses) and this index has not seen, by sequence hash, so
	// a Warm naming them can fetch them. It is called before the index lock
	// is taken, since it reads the remote store. Nil: Warm acts on indexed
	// pages only.
	Import func(ctx context.Context, tenant string, seqs []uint64)
}

// Attach replaces the attachments. Hosts attach when the pools open,
// before an engine can send requests, and detach before they close; a turn
// that races an Attach runs whole with one set or the other. The splicer
// must share the executor's index.
func (e *Executor) Attach(a Attachments) error {
	if a.Splicer != nil && a.Splicer.Index() != e.cfg.Index {
		// One lock for the index: the splicer commits fills under it.
		return fmt.Errorf("executor: the splicer must share the executor's guarded index")
	}
	e.attached.Store(&a)
	return nil
}

// New checks cfg and returns an Executor.
func New(cfg Config) (*Executor, error) {
	if cfg.Index == nil {
		return nil, fmt.Errorf("executor: Index is required")
	}
	if cfg.PinTTL == (ttl.Policy{}) {
		cfg.PinTTL = ttl.DefaultPolicy
	}
	if cfg.LeaseTTL == (ttl.Policy{}) {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if err := cfg.PinTTL.Validate(); err != nil {
		return nil, fmt.Errorf("executor: pin ttl policy: %w", err)
	}
	if err := cfg.LeaseTTL.Validate(); err != nil {
		return nil, fmt.Errorf("executor: lease ttl policy: %w", err)
	}
	if cfg.PauseTier == tier.Device {
		cfg.PauseTier = tier.Disk
	}
	if !cfg.PauseTier.Valid() {
		return nil, fmt.Errorf("executor: pause tier %v is not a tier", cfg.PauseTier)
	}
	if cfg.Salt == nil {
		cfg.Salt = cfg.Index.Salt
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Executor{cfg: cfg}
	if err := e.Attach(cfg.Attachments); err != nil {
		return nil, err
	}
	return e, nil
}

// Limits returns the limits requests are checked against, for transports
// that decode JSON themselves.
func (e *Executor) Limits() directive.Limits { return e.cfg.Limits }

// WorkerID is the worker its replies name.
func (e *Executor) WorkerID() directive.WorkerID { return e.cfg.WorkerID }

// Apply applies one turn all or none and answers per directive. The turn's
// Source and Tenant must be what the transport verified. A refused turn is
// a normal reply (Status error), never a Go error. ctx is checked before the
// turn starts; once started a turn runs to the end (it is short and
// in-memory, and stopping halfway would break all-or-none).
func (e *Executor) Apply(ctx context.Context, t directive.Turn) directive.TurnReply {
	if err := ctx.Err(); err != nil {
		return e.refuseWhole(t, errcode.Wrap(errcode.DeadlineExceeded, err, "before the turn started"))
	}
	if err := directive.ValidateTurn(t, e.cfg.Limits); err != nil {
		te, _ := err.(*directive.TurnError)
		if te == nil || te.Each == nil {
			return e.refuseWhole(t, errcode.From(err))
		}
		return e.finish(t.ID, t.Source, t.Tenant, opsOf(t), te.Each)
	}
	tr := e.newTurn(t.ID, t.Source, t.Tenant, opsOf(t))
	tr.importWarmed(ctx)
	return e.run(tr)
}

// importWarmed lets a Warm name pages that only the shared remote tier
// holds: another host paused them there. Pages this index knows are
// skipped by the importer; pages it cannot find stay unknown, and check
// counts them as missing.
func (t *turn) importWarmed(ctx context.Context) {
	imp := t.att.Import
	if imp == nil {
		return
	}
	for _, o := range t.ops {
		if w, ok := o.(*warmOp); ok && len(w.hashes) > 0 {
			imp(ctx, t.tenant, w.hashes)
		}
	}
}

// ApplyJSON decodes a turn in any directive.DecodeTurn form and applies it
// with source and tenant from the transport. A decoding failure is answered
// as a refused turn and audited.
func (e *Executor) ApplyJSON(ctx context.Context, source, tenant string, data []byte) directive.TurnReply {
	t, err := directive.DecodeTurn(data, e.cfg.Limits)
	if err != nil {
		return e.refuseWhole(directive.Turn{Source: source, Tenant: tenant}, errcode.From(err))
	}
	t.Source, t.Tenant = source, tenant
	return e.Apply(ctx, t)
}

// refuseWhole answers a turn refused as a whole (undecodable, too many
// directives, cancelled), with one audit record for it.
func (e *Executor) refuseWhole(t directive.Turn, err *errcode.Error) directive.TurnReply {
	reply := directive.TurnReply{Status: directive.StatusError, TurnID: t.ID, Error: err, WorkerID: e.cfg.WorkerID}
	reply.Results = make([]directive.Result, len(t.Directives))
	for i, d := range t.Directives {
		reply.Results[i] = directive.Result{Index: i, Verb: verbOf(d), Status: directive.StatusError, Error: err.At(i)}
	}
	e.audit([]Record{{Time: e.cfg.Now(), TurnID: t.ID, Source: t.Source, Tenant: t.Tenant, Index: -1,
		Verb: "turn", Target: t.String(), Status: directive.StatusError, Code: err.Code, Detail: err.Error()}})
	return reply
}

// ErrNotDurable is what an AuditLog returns (wrapped) when it applied the
// records but could not make the turn's pins or leases durable: the reply
// then carries a warning.
var ErrNotDurable = errors.New("not saved to disk")

func (e *Executor) audit(recs []Record) error {
	if e.cfg.Audit == nil {
		return nil
	}
	err := e.cfg.Audit.Append(recs)
	if err != nil && e.cfg.OnAuditError != nil {
		e.cfg.OnAuditError(err)
	}
	return err
}

func verbOf(d directive.Directive) directive.Verb {
	if d == nil {
		return ""
	}
	return d.Verb()
}
