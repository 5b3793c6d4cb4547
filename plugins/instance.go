package plugins

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

type item struct {
	obs    *pb.Observation
	tenant string
}

// instance is one configured policy: its queue, its delivery loop and its
// current process.
type instance struct {
	r    *Runtime
	spec config.Policy
	name string
	log  hclog.Logger
	subs map[policy.Kind]bool

	mu     sync.RWMutex // guards closed against enqueue
	closed bool
	queue  chan item

	// gate, when set, is closed once the instance this one replaced has
	// drained; delivery waits for it.
	gate    <-chan struct{}
	drained chan struct{} // closed when the loop has finished
	stopCtx context.Context
	abort   context.CancelFunc // cuts backoff sleeps short at stop

	procMu   sync.Mutex
	proc     *proc
	failures int // consecutive failed calls or launches, for backoff

	accepted, delivered, inflight, policyErrors, turns, turnErrors, restarts atomic.Uint64
	dropMu                                                                   sync.Mutex
	dropped                                                                  map[string]uint64
}

// start launches spec's process and returns an instance whose loop is not
// yet running.
func (r *Runtime) start(ctx context.Context, spec config.Policy) (*instance, error) {
	sctx, cancel := context.WithTimeout(ctx, r.opts.StartTimeout)
	defer cancel()
	p, err := r.launch(sctx, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	stopCtx, abort := context.WithCancel(context.Background())
	in := &instance{
		r: r, spec: spec, name: spec.Name, log: r.log.Named(spec.Name),
		subs:  map[policy.Kind]bool{},
		queue: make(chan item, r.opts.QueueSize), drained: make(chan struct{}),
		stopCtx: stopCtx, abort: abort, proc: p, dropped: map[string]uint64{},
	}
	for _, k := range p.info.Subscriptions {
		in.subs[k] = true
	}
	in.log.Info("policy started", "plugin", p.info.Name, "version", p.info.Version, "api_version", p.info.APIVersion,
		"pid", p.pid(), "subscriptions", fmt.Sprint(p.info.Subscriptions))
	return in, nil
}

// enqueue accepts it without blocking: queued, or dropped as queue_full.
func (in *instance) enqueue(it item) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	if in.closed {
		return // the runtime switched sets under its own lock first; unreachable
	}
	in.accepted.Add(1)
	select {
	case in.queue <- it:
	default:
		in.drop(DropQueueFull, 1)
	}
}

func (in *instance) drop(reason string, n int) {
	in.dropMu.Lock()
	in.dropped[reason] += uint64(n)
	in.dropMu.Unlock()
	if om := in.r.obs; om != nil {
		om.observations.WithLabelValues(in.name, "dropped_"+reason).Add(float64(n))
	}
	if reason != DropQueueFull || n > 1 {
		in.log.Warn("observations dropped", "reason", reason, "count", n)
	}
}

func (in *instance) stats() Stats {
	in.dropMu.Lock()
	d := make(map[string]uint64, len(in.dropped))
	for k, v := range in.dropped {
		d[k] = v
	}
	in.dropMu.Unlock()
	return Stats{
		Accepted: in.accepted.Load(), Delivered: in.delivered.Load(), Dropped: d,
		Pending:      uint64(len(in.queue)) + in.inflight.Load(),
		PolicyErrors: in.policyErrors.Load(), Turns: in.turns.Load(), TurnErrors: in.turnErrors.Load(),
		Restarts: in.restarts.Load(),
	}
}

func (in *instance) pid() int {
	in.procMu.Lock()
	defer in.procMu.Unlock()
	if in.proc == nil {
		return 0
	}
	return in.proc.pid()
}

// abandon kills the process of an instance whose loop never ran (its set
// was refused) and which never received an observation.
func (in *instance) abandon() {
	in.abort()
	in.procMu.Lock()
	if in.proc != nil {
		in.proc.client.Kill()
		in.proc = nil
	}
	in.procMu.Unlock()
}

// stop refuses new observations, lets the loop drain the queue (within
// ctx; what is left then is dropped as stopped) and kills the process.
func (in *instance) stop(ctx context.Context) error {
	in.mu.Lock()
	if !in.closed {
		in.closed = true
		close(in.queue)
	}
	in.mu.Unlock()
	var err error
	select {
	case <-in.drained:
	case <-ctx.Done():
		in.abort() // stop waiting on backoff; the loop drops the rest
		<-in.drained
		err = fmt.Errorf("policy %q: drain cut short: %w", in.name, ctx.Err())
	}
	in.procMu.Lock()
	if in.proc != nil {
		in.proc.client.Kill()
		in.proc = nil
	}
	in.procMu.Unlock()
	in.log.Info("policy stopped", "stats", fmt.Sprintf("%+v", in.stats()))
	return err
}

// loop delivers the queue in order until it is closed and empty.
func (in *instance) loop() {
	defer close(in.drained)
	if in.gate != nil {
		<-in.gate
	}
	batch := make([]item, 0, in.r.opts.BatchSize)
	for {
		it, ok := <-in.queue
		if !ok {
			return
		}
		batch = append(batch[:0], it)
	fill:
		for len(batch) < cap(batch) {
			select {
			case it, ok := <-in.queue:
				if !ok {
					break fill
				}
				batch = append(batch, it)
			default:
				break fill
			}
		}
		in.inflight.Store(uint64(len(batch)))
		in.deliver(batch)
		in.inflight.Store(0)
	}
}

// deliver sends a batch; when the call fails, the plugin is restarted and
// each observation is retried on its own, so one poisonous observation
// cannot take its neighbours down with it.
func (in *instance) deliver(batch []item) {
	if err := in.call(batch); err == nil {
		return
	}
	if len(batch) == 1 {
		in.retry(batch, 1)
		return
	}
	for i := range batch {
		in.retry(batch[i:i+1], 0)
		in.inflight.Add(^uint64(0)) // one fewer in flight
	}
}

// retry delivers one observation until it succeeds or has failed
// MaxAttempts times in all.
func (in *instance) retry(one []item, failed int) {
	for failed < in.r.opts.MaxAttempts {
		if in.call(one) == nil {
			return
		}
		failed++
	}
	in.drop(DropFailed, 1)
}

// call delivers items to a live process (starting one if needed) and
// handles the replies. Any failure kills the process; the next call
// starts a fresh one after the backoff.
func (in *instance) call(items []item) error {
	p, err := in.ensureProc()
	if err != nil {
		if errors.Is(err, errStopping) {
			in.drop(DropStopped, len(items))
			return nil // accounted for; nothing to retry
		}
		return err
	}
	obs := make([]*pb.Observation, len(items))
	for i, it := range items {
		obs[i] = it.obs
	}
	ctx, cancel := context.WithTimeout(context.Background(), in.r.opts.CallTimeout)
	results, err := p.rpc.Observe(ctx, obs)
	cancel()
	if err != nil {
		reason := "crashed"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = "deadline exceeded (hung?)"
		}
		in.log.Error("policy call failed; restarting the plugin", "reason", reason, "observations", len(items), "error", err)
		in.kill(p)
		return err
	}
	in.procMu.Lock()
	in.failures = 0
	in.procMu.Unlock()
	in.delivered.Add(uint64(len(items)))
	if om := in.r.obs; om != nil {
		om.observations.WithLabelValues(in.name, "delivered").Add(float64(len(items)))
	}
	for i, res := range results {
		in.apply(items[i], res)
	}
	return nil
}

// apply hands one observation's directives to the sink as one turn.
func (in *instance) apply(it item, res pluginwire.Result) {
	if res.Err != nil {
		in.policyErrors.Add(1)
		in.log.Warn("policy error", "seq", it.obs.GetSeq(), "session", it.obs.GetSession(), "error", res.Err)
		return
	}
	if len(res.Directives) == 0 {
		return
	}
	for _, turn := range splitByTenant(in.name, it.tenant, res) {
		err := in.outside(turn.Tenant)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), in.r.opts.SinkTimeout)
			err = in.r.opts.Sink.Apply(ctx, turn)
			cancel()
		}
		in.turns.Add(1)
		result := "ok"
		if err != nil {
			in.turnErrors.Add(1)
			result = "error"
			in.log.Warn("turn refused", "seq", it.obs.GetSeq(), "session", it.obs.GetSession(), "tenant", turn.Tenant, "error", err)
		}
		if om := in.r.obs; om != nil {
			om.turns.WithLabelValues(in.name, result).Inc()
		}
	}
}

// splitByTenant makes one turn per tenant the directives act for, in order
// of first appearance; each turn is all or none on its own, since a turn is
// executed for one tenant.
func splitByTenant(source, obsTenant string, res pluginwire.Result) []directive.Turn {
	if res.Tenants == nil {
		return []directive.Turn{{Source: source, Tenant: obsTenant, Directives: res.Directives}}
	}
	var turns []directive.Turn
	at := map[string]int{}
	for i, d := range res.Directives {
		t := res.Tenants[i]
		if t == "" {
			t = obsTenant
		}
		j, ok := at[t]
		if !ok {
			j = len(turns)
			at[t] = j
			turns = append(turns, directive.Turn{Source: source, Tenant: t})
		}
		turns[j].Directives = append(turns[j].Directives, d)
	}
	return turns
}

var errStopping = errors.New("stopping")

// ensureProc returns the live process, restarting it after the backoff
// when it is gone.
func (in *instance) ensureProc() (*proc, error) {
	for {
		in.procMu.Lock()
		p, failures := in.proc, in.failures
		in.procMu.Unlock()
		if p != nil && !p.client.Exited() {
			return p, nil
		}
		if p != nil {
			in.log.Error("plugin process exited; restarting")
			in.kill(p)
			continue
		}
		if wait := in.backoff(failures); wait > 0 {
			select {
			case <-time.After(wait):
			case <-in.stopCtx.Done():
				return nil, errStopping
			}
		}
		if in.stopCtx.Err() != nil {
			return nil, errStopping
		}
		ctx, cancel := context.WithTimeout(in.stopCtx, in.r.opts.StartTimeout)
		np, err := in.r.launch(ctx, in.spec)
		cancel()
		in.procMu.Lock()
		if err != nil {
			in.failures++
			in.procMu.Unlock()
			in.log.Error("plugin restart failed", "attempt", failures+1, "error", err)
			continue
		}
		in.proc = np
		in.procMu.Unlock()
		in.restarts.Add(1)
		if om := in.r.obs; om != nil {
			om.restarts.WithLabelValues(in.name).Inc()
		}
		in.log.Info("plugin restarted", "pid", np.pid())
		return np, nil
	}
}

// kill ends p and counts a failure for the backoff. A failed call means a
// crashed or hung process: it gets SIGKILL at once, because go-plugin's
// graceful Kill would wait on the hung call first.
func (in *instance) kill(p *proc) {
	if pid := p.pid(); pid > 0 && !p.client.Exited() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	p.client.Kill()
	in.procMu.Lock()
	if in.proc == p {
		in.proc = nil
		in.failures++
	}
	in.procMu.Unlock()
}

// backoff is 0 for the first restart after a healthy run, then
// doubles from BackoffMin up to BackoffMax.
func (in *instance) backoff(failures int) time.Duration {
	if failures <= 1 {
		return 0 // restart at once after a single failure
	}
	d := in.r.opts.BackoffMin << min(failures-2, 20)
	return min(d, in.r.opts.BackoffMax)
}
