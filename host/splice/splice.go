// Package splice executes kvpilot's splice directive
// on the device pool: it asks the cache index for a
// plan, moves the bytes with the kernels, commits the edited branch, and
// hands the engine fill orders for the replacements.
//
// A splice of a session replaces spans of its cached token sequence. In
// mode amortize the downstream tokens keep their K/V and move to their new
// positions: their keys' RoPE slices turn by Δ (R(p+Δ) = R(Δ)·R(p)), V and
// the rest of K stay bit-identical. Whole pages whose rows stay aligned
// (Δ a multiple of the page size) re-link in place, rotated where they
// are; other rows are gathered, rotated and scattered into fresh pages.
// Pages that others use (other sessions' paths, running requests, pins,
// leases, transfers) are copied, never edited (copy-on-write). In mode
// forget the branch is truncated at the edit.
//
// A splice runs in two steps around the index lock, which the host shares
// between the executor, the engine service and the mover:
//
//   - Under the lock (Plan, then Apply, or Cancel): the index plans, fresh
//     slots are reserved, the kernels move the bytes and the index commits
//     the new pages up to the first replacement row, releasing the old
//     pages nothing else uses. All of a turn's splices are planned and
//     reserved before any is applied, so a refused turn changes nothing.
//   - Without it (Finish): the session's sequence is updated, freed slots
//     are handed back, and fill orders go to the engine one by one, left
//     to right (a replacement attends to the ones before it); once all are
//     filled the rest of the branch is committed. While they run, the
//     branch above them is locked so that what they attend to stays.
//
// Session diff (Diff) derives the edits between a session's cached
// sequence and its next request, for hosts with index.auto_splice on.
package splice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
)

// Errors, wrapped with context.
var (
	// ErrUnknownSession: the session has no sequence the host knows.
	ErrUnknownSession = errors.New("unknown session")
	// ErrNoDevice: no device pool is attached, so nothing can be spliced.
	ErrNoDevice = errors.New("no device pool attached to the splicer")
	// ErrCapacity: the device pool lacks the fresh pages the splice needs.
	ErrCapacity = errors.New("device pool has too few free pages for the splice")
	// ErrFill: the engine could not fill a replacement; the branch ends
	// before it and the next request prefills the rest.
	ErrFill = errors.New("replacement fill failed")
)

// Mode is an edit's mode.
type Mode uint8

const (
	// Amortize keeps the downstream tokens, moved by Δ.
	Amortize Mode = iota
	// Forget truncates the cached branch at the edit.
	Forget
)

func (m Mode) String() string {
	if m == Forget {
		return "forget"
	}
	return "amortize"
}

// Edit replaces [Start, End) of the session's current sequence with
// Replacement. Edits of one splice must not overlap; each is applied with
// the running Δ of those before it.
type Edit struct {
	Start, End  int
	Replacement []uint32
	Mode        Mode
	// Recompute, when set, is this edit's own recompute (a directive's);
	// nil takes the tenant's configured one (Config.Rule).
	Recompute *Recompute
}

// FillOrder asks the engine to prefill Tokens at positions [Position,
// Position+len(Tokens)) of the session's edited sequence, attending to the
// pages in PrefixPageSlots and to the first FirstOffset rows of
// PageSlots[0], and to write their K/V into PageSlots from row FirstOffset
// of the first page on. The engine service sends it as it is
// (engine.FillOrder is this type).
//
// A sparse order (an engine that recomputes) sets Positions: Tokens[k]
// sits at Positions[k] (increasing, Positions[0] == Position), PageSlots run
// from the page of Position to the page of the last position, and each
// token attends to every row before its own. Candidates, when set, are
// kept tokens the engine may recompute as well, by its own ranking.
type FillOrder struct {
	Session, Tenant string
	Position        int
	Tokens          []uint32
	PageSlots       []uint32
	FirstOffset     int
	PrefixPageSlots []uint32
	Positions       []uint32
	Candidates      *Candidates
}

// Candidates are a splice's kept tokens after its first edit that its
// sparse order does not name, all inside the order's pages: the engine
// recomputes the first Share of Region of them in position order, or, with
// MaxKL (the quality guard), as many as its estimate of the mean KL per
// token against a re-prefill needs (all of them when nothing less will).
// Region counts every kept token after the first edit, the order's
// included.
//
// Echo, with MaxKL, lists the candidates that repeat the removed text
// (echoes): the guard weighs their staleness more.
type Candidates struct {
	Positions []uint32
	Tokens    []uint32
	Share     float64
	MaxKL     float64
	Region    int
	Echo      []uint32
}

// FillResult is the engine's report of a completed order: kept tokens it
// recomputed from the Candidates, and the guard's estimate of the mean KL
// per token left (0 when the guard did not run).
type FillResult struct {
	Recomputed  int
	EstimatedKL float64
}

// Config configures a Splicer.
type Config struct {
	// Index is the cache index with the host's index lock. Required.
	Index *guarded.Index
	// Device is the device pool and its kernels. Nil: splices are refused
	// with ErrNoDevice.
	Device *Device
	// Sessions resolves sessions. Required.
	Sessions Sessions
	// Salt gives a tenant's hashing salt. Nil: the index's (Index.Salt).
	Salt func(tenant string) blockid.Salt
	// SinkTokens protects the first positions of every sequence.
	SinkTokens int
	// Fill sends a fill order to the engine and returns once it is written
	// (the engine service's Fill). Nil: no engine fills, and a splice's
	// branch ends before its first replacement row.
	Fill func(ctx context.Context, o FillOrder) (FillResult, error)
	// FillTimeout bounds the fills of one splice (default 2 minutes).
	FillTimeout time.Duration
	// Free receives the slots of released pages (any tier) for the pools
	// to free, outside the index lock. The splicer frees the fresh device
	// slots it reserved itself.
	Free func([]cache.Freed)
	// OnFillError is told when a splice's fills fail in the background.
	OnFillError func(session string, err error)
	// Recompute: the engine serves sparse fill orders and ranks kept
	// tokens (its registration said so).
	Recompute bool
	// Rule is a tenant's configured recompute (splice.recompute,
	// splice.max_kl); nil: none.
	Rule func(tenant string) Recompute
	// OnRecompute is told what a splice recomputed once its order is done.
	OnRecompute func(session string, r RecomputeResult)
}

// Splicer executes splices. It is safe for concurrent use.
type Splicer struct {
	cfg Config
	wg  sync.WaitGroup
}

// New checks cfg and returns a Splicer.
func New(cfg Config) (*Splicer, error) {
	if cfg.Index == nil || cfg.Sessions == nil {
		return nil, fmt.Errorf("splicer: Index and Sessions are required")
	}
	if cfg.Device != nil && cfg.Device.Layout().PageSize != cfg.Index.PageSize() {
		return nil, fmt.Errorf("splicer: device pages of %d tokens, index pages of %d", cfg.Device.Layout().PageSize, cfg.Index.PageSize())
	}
	if cfg.SinkTokens < 0 {
		return nil, fmt.Errorf("splicer: sink tokens %d must not be negative", cfg.SinkTokens)
	}
	if cfg.Salt == nil {
		cfg.Salt = cfg.Index.Salt
	}
	if cfg.FillTimeout <= 0 {
		cfg.FillTimeout = 2 * time.Minute
	}
	return &Splicer{cfg: cfg}, nil
}

// Index returns the guarded index the splicer takes; the executor must run
// its turns under the same one.
func (s *Splicer) Index() *guarded.Index { return s.cfg.Index }

// Sessions returns the configured session resolver.
func (s *Splicer) Sessions() Sessions { return s.cfg.Sessions }

// SinkTokens returns the protected prefix length.
func (s *Splicer) SinkTokens() int { return s.cfg.SinkTokens }

// Snapshot is what Plan needs of a session, read without the index lock.
type Snapshot struct {
	Session Session
	// Leaves are the other sessions' last cached pages (Sessions.Leaves).
	Leaves []uint64
}

// Snapshot reads session id. Call it without the index lock held.
func (s *Splicer) Snapshot(id string) (Snapshot, error) {
	sess, ok := s.cfg.Sessions.Session(id)
	if !ok {
		return Snapshot{}, fmt.Errorf("session %q: %w", id, ErrUnknownSession)
	}
	return Snapshot{Session: sess, Leaves: s.cfg.Sessions.Leaves(sess.Tenant, id)}, nil
}

// Splice edits session id and waits until its fills are done (or ctx
// ends). It takes the index lock itself; the caller must not hold it.
func (s *Splicer) Splice(ctx context.Context, id string, edits []Edit) (Result, error) {
	snap, err := s.Snapshot(id)
	if err != nil {
		return Result{}, err
	}
	var j *Job
	s.cfg.Index.Do(func(ix *cache.Index) {
		if j, err = s.Plan(ix, snap, edits); err == nil {
			if err = j.Apply(ix); err != nil {
				j.Cancel()
			}
		}
	})
	if j != nil {
		s.complete(j) // an applied job, even a failed one, updates the session and frees
	}
	if err != nil {
		return Result{}, err
	}
	if j.pendingFills() {
		err = s.runFills(ctx, j)
	}
	return j.res, err
}

// Finish completes applied jobs outside the index lock: sessions are
// updated, released slots handed to Config.Free, and the fills of each job
// run in the background (Wait waits for them).
func (s *Splicer) Finish(jobs ...*Job) {
	for _, j := range jobs {
		s.complete(j)
		if !j.pendingFills() {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FillTimeout)
			defer cancel()
			if err := s.runFills(ctx, j); err != nil && s.cfg.OnFillError != nil {
				s.cfg.OnFillError(j.snap.Session.ID, err)
			}
		}()
	}
}

// Wait waits for every background fill started by Finish.
func (s *Splicer) Wait() { s.wg.Wait() }
