package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// tenant is the tenant the scenarios' requests and directives run under.
const tenant = "bench"

// RigOptions shape a benchmark host and its reference engine.
type RigOptions struct {
	PageSize    int
	DevicePages int
	HostPages   int
	// DiskPages 0 disables the disk tier (and so Pause to disk).
	DiskPages int
	// Model is "gqa" (default) or "mla".
	Model string
	Cost  refengine.CostModel
	// SkipContract turns the reference engine's per-request contract check
	// off (floods of thousands of requests).
	SkipContract bool
	AutoSplice   bool
	// HostOnly starts the host alone, for a scenario that brings its own
	// engine (real-model's Python side).
	HostOnly bool
	// PauseTier is host, disk (default) or remote.
	PauseTier string
	// Adjust, when set, edits the host configuration last.
	Adjust func(*config.Config)
	// Log receives the host's warnings (nil: discarded).
	Log hclog.Logger
	// Options are passed to daemon.New.
	Options []daemon.Option
}

// defaultRigLog is the host logger of rigs whose options name none (tests
// set it to read what the host warned about).
var defaultRigLog hclog.Logger

// Rig is a real kvpilot host (the daemon, in this process, on private
// Unix sockets under a temporary directory) with the reference engine
// registered over its engine socket. Nothing is mocked: KV bytes live in
// memfd arenas shared through passed descriptors.
type Rig struct {
	Daemon *daemon.Daemon
	Engine *refengine.Engine
	// Fills serves the engine's splice fill orders and counts them.
	Fills  *refengine.FillServer
	Config config.Config

	dir       string
	cancel    context.CancelFunc
	done      chan error
	fillsDone chan struct{}

	// controls are Control socket clients, one per source the scenarios
	// name (a client names itself once, when it dials).
	mu       sync.Mutex
	controls map[string]*controlclient.UnixClient
}

// StartRig starts a host and registers a reference engine with it.
func StartRig(ctx context.Context, o RigOptions) (*Rig, error) {
	o.PageSize = cmp.Or(o.PageSize, 16)
	o.Cost = cmp.Or(o.Cost, refengine.DefaultCost)
	dir, err := os.MkdirTemp("", "kvpilot-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench rig: %w", err)
	}
	c := config.Default()
	c.DataDir = dir
	c.HTTP.Listen = ""
	c.NATS.Listen = ""
	c.Log.Level = "warn"
	c.Index.PageSize = o.PageSize
	c.Index.AutoSplice = o.AutoSplice
	c.Index.PauseTier = cmp.Or(o.PauseTier, c.Index.PauseTier)
	c.Tiers.Device.CapacityPages = o.DevicePages
	c.Tiers.Host.CapacityPages = o.HostPages
	c.Tiers.Disk.CapacityPages = o.DiskPages
	c.Tiers.Remote.CapacityPages = 0
	c.Mover.StepInterval = 20 * time.Millisecond
	if o.Adjust != nil {
		o.Adjust(&c)
	}
	if err := c.Validate(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench rig: %w", err)
	}
	log := cmp.Or(o.Log, defaultRigLog, hclog.NewNullLogger())
	d, err := daemon.New(c, log, o.Options...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench rig: start host: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Rig{Daemon: d, Config: c, dir: dir, cancel: cancel, done: make(chan error, 1), controls: map[string]*controlclient.UnixClient{}}
	go func() { r.done <- d.Run(rctx) }()
	if o.HostOnly {
		return r, nil
	}

	model := refengine.GQA(o.PageSize)
	if o.Model == "mla" {
		model = refengine.MLA(o.PageSize)
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	r.Engine, err = refengine.New(dctx, refengine.Config{Socket: c.EngineSocket(), EngineID: "bench", Model: model,
		Cost: o.Cost, Seed: 7, SkipContract: o.SkipContract})
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("bench rig: register the reference engine: %w", err)
	}
	r.Fills, r.fillsDone = &refengine.FillServer{}, make(chan struct{})
	go func() {
		defer close(r.fillsDone)
		if err := r.Fills.ServeFills(rctx, r.Engine); err != nil && rctx.Err() == nil {
			log.Warn("bench rig: fill stream ended", "error", err)
		}
	}()
	return r, nil
}

// Close stops the engine and the host and removes the data directory.
func (r *Rig) Close() error {
	var errs []error
	r.mu.Lock()
	for _, c := range r.controls {
		errs = append(errs, c.Close())
	}
	r.mu.Unlock()
	r.cancel()
	if r.fillsDone != nil {
		<-r.fillsDone
	}
	if r.Engine != nil {
		errs = append(errs, r.Engine.Close())
	}
	select {
	case err := <-r.done:
		errs = append(errs, err)
	case <-time.After(15 * time.Second):
		errs = append(errs, errors.New("bench rig: host did not stop within 15s"))
	}
	errs = append(errs, os.RemoveAll(r.dir))
	return errors.Join(errs...)
}

// Stats is the cache index's snapshot.
func (r *Rig) Stats() (st cache.Stats) {
	r.Daemon.Index().Do(func(ix *cache.Index) { st = ix.Stats() })
	return st
}

// Residency counts, per tier, how many of a tenant's pages (sequence
// hashes) are resident there.
func (r *Rig) Residency(tenant string, seqs []uint64) [tier.Count]int {
	var out [tier.Count]int
	r.Daemon.Index().Do(func(ix *cache.Index) {
		for _, s := range seqs {
			if p, ok := ix.Lookup(tenant, s); ok {
				for _, t := range tier.All {
					if p.Tiers.Has(t) {
						out[t]++
					}
				}
			}
		}
	})
	return out
}

// Apply sends directives as one turn over the host's Control socket, as an
// operator's or a policy's client would, named source, and fails on a
// refusal: the turn is counted and audited as every door's.
func (r *Rig) Apply(ctx context.Context, source, tenant string, ds ...directive.Directive) (directive.TurnReply, error) {
	c, err := r.control(source)
	if err != nil {
		return directive.TurnReply{}, err
	}
	rep, err := c.Apply(ctx, directive.Turn{Tenant: tenant, Directives: ds})
	switch {
	case err != nil:
		return rep, fmt.Errorf("bench rig: %s from %s: %w", verbs(ds), source, err)
	case !rep.OK():
		return rep, fmt.Errorf("directive turn refused: %s from %s: %v", verbs(ds), source, rep.Error)
	}
	return rep, nil
}

// control is the Control socket client named source, dialed on first use.
func (r *Rig) control(source string) (*controlclient.UnixClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.controls[source]; c != nil {
		return c, nil
	}
	c, err := controlclient.DialUnix(r.Daemon.ControlSocket(), controlclient.UnixOptions{Source: source})
	if err != nil {
		return nil, fmt.Errorf("bench rig: dial the Control socket: %w", err)
	}
	r.controls[source] = c
	return c, nil
}

// ApplyPolicy applies a policy's directives, one turn per tenant (a policy
// may scope directives to tenants with policy.WithTenant; unscoped, the
// scenarios' tenant).
func (r *Rig) ApplyPolicy(ctx context.Context, source string, ds []policy.Directive) error {
	byTenant := map[string][]directive.Directive{}
	for _, d := range ds {
		t, inner := policy.Unwrap(d)
		byTenant[cmp.Or(t, tenant)] = append(byTenant[cmp.Or(t, tenant)], inner)
	}
	for _, t := range slices.Sorted(maps.Keys(byTenant)) {
		if _, err := r.Apply(ctx, source, t, byTenant[t]...); err != nil {
			return err
		}
	}
	return nil
}

func verbs(ds []directive.Directive) string {
	vs := make([]string, len(ds))
	for i, d := range ds {
		vs[i] = string(d.Verb())
	}
	return strings.Join(vs, ",")
}

// WaitSettled waits until the mover has no write-through queued and no
// transfer in flight, so a measurement sees the tiers at rest.
func (r *Rig) WaitSettled(ctx context.Context, within time.Duration) error {
	return waitFor(ctx, within, func() (int, string) {
		st := r.Stats()
		pending := st.WriteThroughQueued + st.InFlight
		for _, t := range st.Tiers {
			pending += t.PendingIn + t.PendingDrop
		}
		return pending, "tiers not settled (transfers pending)"
	})
}

// waitFor polls left every 10 ms until it counts nothing left, failing
// with what it says is left after within.
func waitFor(ctx context.Context, within time.Duration, left func() (int, string)) error {
	deadline := time.Now().Add(within)
	for {
		n, what := left()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench rig: %s after %v: %d", what, within, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// turn runs req on the engine as session's next request for tenant.
func (r *Rig) turn(ctx context.Context, session, tenant string, req Request) (refengine.TurnStats, error) {
	return runTurn(ctx, r.Engine, nil, refengine.TurnRequest{Session: session, Tenant: tenant, Tokens: req.Prompt, Output: req.Output, Messages: req.Messages})
}

// started is the observation a policy gets of request k of session
// starting, for the scenarios' tenant, with its prompt and messages.
func started(session string, k int, prompt []uint32, msgs []chat.Message, pageSize int) policy.Observation {
	return policy.Observation{Kind: policy.KindRequestStarted, Session: session, Tenant: tenant, Started: &policy.RequestStarted{
		RequestID: fmt.Sprintf("%s/%d", session, k), Turn: int64(k), PromptTokens: int64(len(prompt)), PageSize: uint32(pageSize),
		BlockHashes: hashesOf(prompt, pageSize, tenant), Messages: msgs}}
}

// hashesOf returns the sequence hashes of tokens' full pages as the host
// computes them for tenant (namespace salt on, the default).
func hashesOf(tokens []uint32, pageSize int, tenant string) []uint64 {
	return blockid.Compute(tokens, pageSize, blockid.Salt{Namespace: tenant}).Sequence
}

// WaitLeasesSettled waits until every named lease has its pages on the
// pause tier alone (the hotter copies freed).
func (r *Rig) WaitLeasesSettled(ctx context.Context, ids []string, within time.Duration) error {
	return waitFor(ctx, within, func() (unsettled int, _ string) {
		r.Daemon.Index().Do(func(ix *cache.Index) {
			for _, id := range ids {
				if li, ok := ix.Lease(id); ok && !li.Settled {
					unsettled++
				}
			}
		})
		return unsettled, fmt.Sprintf("leases of %d not settled", len(ids))
	})
}
