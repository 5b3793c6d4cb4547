// Package engine is the engine service's state machine: what the host
// keeps for the inference engine that caches its KV in it. Its RPC adapter,
// host/engine/grpcserver, turns kvpilot.v1.Engine calls on the engine
// socket into calls of Service and their results back into proto; nothing
// here knows the wire.
//
// An engine registers its KV layout and RoPE config (Register) and gets the
// pools the host allocated. Per request it calls Match (longest cached
// prefix, load-back from colder tiers all or nothing within a deadline, pins
// refreshed, pages locked), Allocate (device slots for the rest), Commit
// (full pages enter the cache and are written through), and Release or
// Finish (locks dropped, unused slots freed; Finish also pins the request's
// prefix for its cache_control TTL through the ingress, so the pin is
// counted, audited and budgeted as every door's directives are). Fill
// orders carry the prefill work splice replacements need to the engine.
//
// Two modes (mode.go): in arena mode the engine computes in the device arena
// the host allocated; in connector mode (vLLM's KV connector) the engine
// keeps its own device memory and copies pages through the device tier,
// which is then a staging arena, and the processes of one engine share one
// registration.
//
// Registrations are versioned and fail closed: every call names its
// registration, and a host that restarted (a new boot id) knows none, so the
// engine's next call fails with unknown_registration and it registers again.
// One engine serves a host at a time: a new registration re-attaches to the
// pools when the layout is the same (an engine restart) and retires the old
// one, releasing whatever requests it left behind. A different layout is
// refused while pages are cached, unless the engine asks for a reset.
//
// The service keeps, per session, the latest token sequence it cached, which
// splice and session diff read (SpliceSessions), and it carries the
// splicer's fill orders to the engine (SpliceFill). With auto-splice on,
// Match first diffs the request against the session's cached sequence and
// splices the cache to match (splicer.go).
//
// Positions: a request's tokens are the prompt the model attends, and its
// message spans index those tokens. After a splice of a session (a policy's
// or an operator's directive), the engine's next prompt of that session
// must carry the edit: it is the session's edited sequence plus the new
// turn, so the spans the host reports to policies are positions in the
// cached sequence. An engine whose harness keeps sending the unedited
// history should run with auto-splice off for directive splices, or the
// host splices the history back.
//
// Locking (the lock order is host/internal/guarded's): the service mutex
// guards registrations, the request table, sessions and stats; a request's
// own mutex guards its call protocol and its record (request.go), and is
// never held across a call into another package; what a request holds in
// the index and the pools (its page lock, its slots) changes only under the
// index lock. Neither the service mutex nor a request's is held across a
// transfer.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/host/splice"
)

// Pools are one layout's tier pools and the mover that runs on them.
type Pools struct {
	Layout *layout.Layout
	Set    *tiers.Set
	Mover  *mover.Mover
	// DeviceOrdinal is the GPU the device arena lives on (CUDA backend).
	DeviceOrdinal int
	// Close releases the pools; nil when they are not the service's to
	// close (the host opened them at start from its configured model).
	Close func() error
}

// Config configures a Service.
type Config struct {
	// Index is the host's cache index with the one lock every component
	// takes around it. Required.
	Index *guarded.Index
	// Ingress applies Finish's cache_control pin, as every door's
	// directives are applied: counted and audited. Required.
	Ingress *ingress.Ingress
	// Pools, when set, were opened at start from the configured model: a
	// registration must match their layout.
	Pools *Pools
	// OpenPools opens pools for the first registered layout when Pools is
	// nil (and again after a reset to another layout). In connector mode
	// the device tier must open in shared memory (a staging arena).
	OpenPools func(ctx context.Context, l *layout.Layout, mode Mode) (*Pools, error)
	// LoadBackDeadline caps a Match's load-back (default 2s).
	LoadBackDeadline time.Duration
	// RequestTTL releases requests idle this long (default 10m).
	RequestTTL time.Duration
	// MaxSessions bounds the remembered sessions (default 65536).
	MaxSessions int
	// MaxTokens bounds one request's tokens (default 1<<20).
	MaxTokens int
	// Observer is told about requests; nil tells no one.
	Observer Observer
	// OnRegister is called after each successful registration (not after
	// a process joins one), before the engine hears back, with the
	// registration and its pools: the host builds the layout's splicer
	// there and installs it with SetSplicer. It must not call the
	// service's registration methods.
	OnRegister func(Registration, *Pools)
	// OnPoolsClose is called before the service closes pools it opened (a
	// layout change, or Close), so the host detaches what uses them.
	OnPoolsClose func(*Pools)
	// CheckRecompute, when set, judges a registration against the host's
	// recompute settings (splice.recompute, splice.max_kl): an engine that
	// cannot do what they ask is refused, never silently served without.
	// recompute says whether the engine serves sparse fill orders.
	CheckRecompute func(mode Mode, recompute bool) error
	// AutoSplice runs session diff before every Match (index.auto_splice):
	// a request that edits its session's cached history gets the cache
	// spliced to match. It needs an installed splicer.
	AutoSplice bool
	// Metrics receives token counts and load-back latency; nil: none.
	Metrics *metrics.Metrics
	// Log; nil discards.
	Log hclog.Logger
	// Now is the wall clock for request ages; nil means time.Now.
	Now func() time.Time
}

// Service is the engine service's state. It is safe for concurrent use.
type Service struct {
	cfg    Config
	bootID string
	kick   chan struct{}

	mu       sync.Mutex
	reg      *registration // the live one, or nil
	pools    *Pools        // open pools (cfg.Pools, or opened on Register)
	requests map[string]*request
	sessions *sessions
	fills    *fillHub
	nextReq  uint64
	stats    Stats

	// splicer is the live layout's (SetSplicer); nil until one is built.
	splicer atomic.Pointer[splice.Splicer]
}

// Errors of New.
var ErrConfig = errors.New("engine service: invalid config")

// New checks cfg and builds the service.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Index == nil:
		return nil, fmt.Errorf("%w: Index is required", ErrConfig)
	case cfg.Ingress == nil:
		return nil, fmt.Errorf("%w: Ingress is required", ErrConfig)
	case cfg.Pools == nil && cfg.OpenPools == nil:
		return nil, fmt.Errorf("%w: give Pools or OpenPools", ErrConfig)
	}
	if cfg.LoadBackDeadline <= 0 {
		cfg.LoadBackDeadline = 2 * time.Second
	}
	if cfg.RequestTTL <= 0 {
		cfg.RequestTTL = 10 * time.Minute
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 65536
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 1 << 20
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{
		cfg:      cfg,
		bootID:   randomID(8),
		kick:     make(chan struct{}, 1),
		pools:    cfg.Pools,
		requests: map[string]*request{},
		sessions: newSessions(cfg.MaxSessions, cfg.Index.PageSize(), cfg.Index.Namespace),
		fills:    newFillHub(),
	}
	s.sessions.maxBytes = sessionBudget(cfg.Index.Config())
	return s, nil
}

// BootID identifies this service instance; it changes at every host start.
func (s *Service) BootID() string { return s.bootID }

// PageSize is the index's page size in tokens, what every registration's
// layout must have.
func (s *Service) PageSize() int { return s.cfg.Index.PageSize() }

// Run does the service's background work until ctx ends: it releases idle
// requests, and runs the mover's plan after commits (write-through) and on
// a timer when the service opened the pools itself (the host's step loop
// covers pools opened at start).
func (s *Service) Run(ctx context.Context, stepEvery time.Duration) {
	if stepEvery <= 0 {
		stepEvery = 100 * time.Millisecond
	}
	t := time.NewTicker(stepEvery)
	defer t.Stop()
	reap := time.NewTicker(min(s.cfg.RequestTTL/4, time.Minute))
	defer reap.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reap.C:
			s.reapIdle()
			continue
		case <-s.kick:
		case <-t.C:
			if s.cfg.Pools != nil {
				continue // the host's own loop steps its pools
			}
		}
		if p := s.currentPools(); p != nil {
			if r := p.Mover.Step(ctx); len(r.Errors) > 0 && ctx.Err() == nil {
				s.cfg.Log.Warn("tier step had failures", "failed", r.Failed, "errors", errors.Join(r.Errors...))
			}
		}
	}
}

// Close releases every request and closes pools the service opened.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retireLocked("host shutting down")
	s.SetSplicer(nil)
	if s.pools != nil && s.pools.Close != nil {
		if f := s.cfg.OnPoolsClose; f != nil {
			f(s.pools)
		}
		err := s.pools.Close()
		s.pools = nil
		return err
	}
	return nil
}

func (s *Service) currentPools() *Pools {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools
}

// kickStep asks Run for a mover step soon (coalesced).
func (s *Service) kickStep() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's CSPRNG does not fail
	}
	return hex.EncodeToString(b)
}
