// Package plugins is the host side of kvpilot's policy plugins: it
// launches each configured policy as a separate process, delivers
// the observations it subscribed to, and hands the directives that come
// back to the executor under the policy's name.
//
// The host never blocks on a plugin. Observe only enqueues: each policy
// instance has a bounded queue and one delivery loop, which sends batches in
// arrival order (so every session's observations stay in order) with a
// deadline on every call. A plugin that crashes or hangs past the deadline
// is killed and restarted with exponential backoff, and the batch is
// delivered again to the fresh process, one observation at a time; an
// observation that fails MaxAttempts times is dropped. Every accepted
// observation ends delivered, dropped with a reason, or still pending:
// Stats says which, and the counts always add up.
//
// Swap replaces the running set while observations flow: it starts the new
// instances (all must start, or nothing changes), switches Observe to them,
// lets the old ones drain their queues, then stops them. A replaced policy's
// new instance delivers nothing until its predecessor has drained, so its
// sessions stay in order across the swap. WatchConfig drives Swap from the
// config file.
package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
)

// Sink receives each policy turn: the directives a policy returned for one
// observation, with Source set to the policy's configured name and Tenant
// to the observation's. The host's executor implements it.
type Sink interface {
	Apply(ctx context.Context, t directive.Turn) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, t directive.Turn) error

// Apply calls f.
func (f SinkFunc) Apply(ctx context.Context, t directive.Turn) error { return f(ctx, t) }

// Sentinel errors.
var (
	// ErrClosed is returned once the runtime is closed.
	ErrClosed = errors.New("plugins: runtime closed")
	// ErrStart wraps a policy that failed to start; the set it belonged to
	// was not installed.
	ErrStart = errors.New("plugins: policy failed to start")
)

// Options configure a Runtime. Zero fields take the defaults noted.
type Options struct {
	// Executable runs built-ins (default: this process's executable).
	Executable string
	// BuiltinArgs are the arguments for built-in name (default: policy NAME).
	BuiltinArgs func(name string) []string
	// Env is added to every plugin process's environment.
	Env []string
	// Sink receives the directives (default: discarded, counted).
	Sink   Sink
	Logger hclog.Logger
	// Metrics, when set, receives plugin restarts and observation counts.
	Metrics *metrics.Metrics

	CallTimeout  time.Duration // per Observe call (default 2s)
	StartTimeout time.Duration // launch, Info and Configure (default 10s)
	SinkTimeout  time.Duration // per turn handed to the sink (default 5s)
	QueueSize    int           // observations queued per policy (default 4096)
	BatchSize    int           // observations per call (default 64)
	// MaxAttempts is how many times one observation is delivered to a
	// failing plugin before it is dropped (default 2).
	MaxAttempts int
	// BackoffMin and BackoffMax bound the restart backoff (default 100ms, 10s).
	BackoffMin, BackoffMax time.Duration
}

func (o *Options) fill() error {
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("plugins: find own executable for built-ins: %w", err)
		}
		o.Executable = exe
	}
	if o.BuiltinArgs == nil {
		o.BuiltinArgs = func(name string) []string { return []string{"policy", name} }
	}
	if o.Sink == nil {
		o.Sink = SinkFunc(func(context.Context, directive.Turn) error { return nil })
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.CallTimeout, 2*time.Second)
	def(&o.StartTimeout, 10*time.Second)
	def(&o.SinkTimeout, 5*time.Second)
	def(&o.BackoffMin, 100*time.Millisecond)
	def(&o.BackoffMax, 10*time.Second)
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 64
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 2
	}
	return nil
}

// Runtime runs a set of policy plugins.
type Runtime struct {
	opts Options
	log  hclog.Logger
	obs  *observationMetrics

	seq atomic.Uint64

	swapMu sync.Mutex // serializes Swap and Close
	mu     sync.RWMutex
	set    []*instance // current set, in config order; guarded by mu
	closed bool
	gen    atomic.Uint64

	retiredMu sync.Mutex
	retired   map[string]Stats // final stats of stopped instances, by name

	reloads struct{ applied, rejected atomic.Uint64 }
}

// Reloads returns how many config changes WatchConfig applied and rejected.
func (r *Runtime) Reloads() (applied, rejected uint64) {
	return r.reloads.applied.Load(), r.reloads.rejected.Load()
}

// New returns a runtime with no policies; call Swap to start some.
func New(opts Options) (*Runtime, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	r := &Runtime{opts: opts, log: opts.Logger.Named("plugins"), retired: map[string]Stats{}}
	if opts.Metrics != nil {
		var err error
		if r.obs, err = newObservationMetrics(opts.Metrics); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Observe offers obs to every running policy that subscribed to its kind,
// without blocking. It numbers obs (Seq) and returns an error only for an
// observation that is malformed or arrives after Close; a full queue is a
// drop, counted with reason "queue_full".
func (r *Runtime) Observe(obs policy.Observation) error {
	obs.Seq = r.seq.Add(1)
	p, err := pluginwire.ToProto(obs)
	if err != nil {
		return fmt.Errorf("plugins: %w", err)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	for _, in := range r.set {
		if in.subs[obs.Kind] && in.admits(obs) {
			in.enqueue(item{obs: p, tenant: obs.Tenant})
		}
	}
	return nil
}

// Generation counts the sets installed by Swap.
func (r *Runtime) Generation() uint64 { return r.gen.Load() }

// Policies returns the running policies' names, in config order.
func (r *Runtime) Policies() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, len(r.set))
	for i, in := range r.set {
		out[i] = in.name
	}
	return out
}

// PIDs returns the running plugin processes by policy name (0 while one is
// restarting), for operators and tests.
func (r *Runtime) PIDs() map[string]int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]int{}
	for _, in := range r.set {
		out[in.name] = in.pid()
	}
	return out
}

// Stats returns every policy's counters, running ones and, summed under
// their names, the instances a swap or Close retired.
func (r *Runtime) Stats() map[string]Stats {
	out := map[string]Stats{}
	r.retiredMu.Lock()
	for n, s := range r.retired {
		out[n] = s
	}
	r.retiredMu.Unlock()
	r.mu.RLock()
	for _, in := range r.set {
		out[in.name] = out[in.name].add(in.stats())
	}
	r.mu.RUnlock()
	return out
}

// Swap installs specs as the running set: it starts every new or changed
// policy (an unchanged one keeps running), switches observations to the new
// set, then drains and stops the instances that left it, waiting for that
// within ctx. If any policy fails to start, the old set keeps running and
// the error says which.
func (r *Runtime) Swap(ctx context.Context, specs []config.Policy) error {
	r.swapMu.Lock()
	defer r.swapMu.Unlock()
	r.mu.RLock()
	closed, old := r.closed, r.set
	r.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	byName := map[string]*instance{}
	for _, in := range old {
		byName[in.name] = in
	}
	next := make([]*instance, 0, len(specs))
	var started []*instance
	keep := map[*instance]bool{}
	for _, s := range specs {
		if prev := byName[s.Name]; prev != nil && sameSpec(prev.spec, s) {
			next = append(next, prev)
			keep[prev] = true
			continue
		}
		in, err := r.start(ctx, s)
		if err != nil {
			for _, st := range started {
				st.abandon()
			}
			return err
		}
		if prev := byName[s.Name]; prev != nil {
			in.gate = prev.drained // stay in order behind the old instance
		}
		started = append(started, in)
		next = append(next, in)
	}
	r.mu.Lock()
	r.set = next
	r.mu.Unlock()
	r.gen.Add(1)
	for _, in := range started {
		go in.loop()
	}
	var errs []error
	for _, in := range old {
		if keep[in] {
			continue
		}
		if err := in.stop(ctx); err != nil {
			errs = append(errs, err)
		}
		r.retire(in)
	}
	names := make([]string, len(next))
	for i, in := range next {
		names[i] = in.name
	}
	r.log.Info("policy set installed", "generation", r.gen.Load(), "policies", names, "started", len(started))
	return errors.Join(errs...)
}

// Close drains every policy's queue within ctx and stops the plugins.
// Observations offered afterwards are refused with ErrClosed.
func (r *Runtime) Close(ctx context.Context) error {
	r.swapMu.Lock()
	defer r.swapMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	set := r.set
	r.set = nil
	r.mu.Unlock()
	var errs []error
	for _, in := range set {
		if err := in.stop(ctx); err != nil {
			errs = append(errs, err)
		}
		r.retire(in)
	}
	return errors.Join(errs...)
}

func (r *Runtime) retire(in *instance) {
	r.retiredMu.Lock()
	r.retired[in.name] = r.retired[in.name].add(in.stats())
	r.retiredMu.Unlock()
}

// PolicyNames returns specs' names sorted, for logs.
func PolicyNames(specs []config.Policy) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	sort.Strings(out)
	return out
}
