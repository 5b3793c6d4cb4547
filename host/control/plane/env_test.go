package plane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

const pageSize = 4

// env is a host built from real parts: a cache index behind an executor
// with an audit ring, the embedded NATS server (in-process, JetStream on),
// and the control plane on a real Unix socket, with a client on each
// transport.
type env struct {
	t       testing.TB
	g       *guarded.Index // ix with the lock the executor takes
	ix      *cache.Index
	ex      *executor.Executor
	ring    *executor.Ring
	q       *events.Queue
	nats    *natsembed.NATS
	metrics *metrics.Metrics
	plane   *Plane
	cancel  context.CancelFunc
	done    chan error

	uds *controlclient.UnixClient
	nc  *controlclient.NATSClient

	loc   uint64
	trans int
}

func newEnv(t testing.TB, mods ...func(*Config)) *env {
	t.Helper()
	return newLimitedEnv(t, nil, mods...)
}

// newLimitedEnv is newEnv with the ingress's per-door rate limits.
func newLimitedEnv(t testing.TB, limits map[ingress.Door]ingress.RateLimit, mods ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, q: events.NewQueue(), ring: executor.NewRing(256), metrics: metrics.New()}
	var err error
	e.ix, err = cache.New(cache.Config{
		PageSize: pageSize,
		Tiers: [tier.Count]cache.TierConfig{
			tier.Device: {Capacity: 1 << 16, High: 0.95, Low: 0.9, PinFraction: 0.5},
			tier.Host:   {Capacity: 1 << 16, High: 0.95, Low: 0.9, PinFraction: 0.5},
			tier.Disk:   {Capacity: 1 << 16, High: 0.95, Low: 0.9, PinFraction: 0.5},
		},
		DeviceWrite: cache.WriteNone,
		Clock:       cache.NewMonotonicClock(),
		OnEvent:     e.q.Push,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.g = guarded.New(e.ix)
	e.ex, err = executor.New(executor.Config{
		Index: e.g, WorkerID: "42", Audit: e.ring,
		Attachments: executor.Attachments{
			Transitions: func(ts []cache.Transition) { e.trans += len(ts) },
			Free:        func([]cache.Freed) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	e.nats, err = natsembed.Start(natsembed.Options{DataDir: filepath.Join(dir, "nats"), Listen: ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.nats.Close() })
	in, err := ingress.New(ingress.Config{Executor: e.ex, Audit: e.ring, Metrics: e.metrics, RateLimits: limits})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Socket:  uds.Options{Path: filepath.Join(dir, "run", "control.sock")},
		Ingress: in, Index: e.g, Events: e.q, NATS: e.nats.Conn(),
		WorkerID: 42, EventsSubject: events.Subject("dynamo", "backend"),
		WorkerSubject: "kv-control-42", BroadcastSubject: "kv-control-broadcast",
		Metrics: e.metrics,
	}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.plane, err = New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.plane.Run(ctx) }()
	t.Cleanup(e.stop)

	if e.uds, err = controlclient.DialUnix(e.plane.SocketPath(), controlclient.UnixOptions{Source: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.uds.Close() })
	conn, err := e.nats.Connect("test-client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if e.nc, err = controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: cfg.WorkerSubject, EventsSubject: cfg.EventsSubject}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("plane Run: %v", err)
		}
	case <-time.After(30 * time.Second): // generous: a hang, not a slow machine
		e.t.Error("plane did not stop within 30s")
	}
}

// shortTempDir keeps socket paths under the 107-byte limit whatever the
// test's name.
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "kvp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func toks(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

// commit caches tokens for tenant on the device, as an engine's Commit
// would, and returns their hashes.
func (e *env) commit(tenant string, tokens []uint32) blockid.Hashes {
	e.t.Helper()
	var m cache.MatchResult
	e.g.Do(func(ix *cache.Index) {
		ix.Match(tenant, blockid.Salt{Namespace: tenant}, tokens, &m)
		locs := make([]uint64, len(m.Hashes.Local))
		for i := range locs {
			e.loc++
			locs[i] = e.loc
		}
		var res cache.CommitResult
		if err := ix.Commit(tenant, m.Hashes, locs, &res); err != nil {
			e.t.Fatal(err)
		}
	})
	return blockid.Hashes{Local: append([]uint64(nil), m.Hashes.Local...), Sequence: append([]uint64(nil), m.Hashes.Sequence...)}
}

func (e *env) page(tenant string, seq uint64) (p cache.PageInfo, ok bool) {
	e.g.Do(func(ix *cache.Index) { p, ok = ix.Lookup(tenant, seq) })
	return p, ok
}

func (e *env) lease(id string) (li cache.LeaseInfo, ok bool) {
	e.g.Do(func(ix *cache.Index) { li, ok = ix.Lease(id) })
	return li, ok
}

// snapshot is everything a refused request must leave unchanged.
func (e *env) snapshot(tenant string, seqs ...uint64) (s string) {
	e.g.Do(func(ix *cache.Index) { s = indexState(ix, tenant, seqs) })
	return s
}

func indexState(ix *cache.Index, tenant string, seqs []uint64) string {
	s := fmt.Sprintf("%+v", ix.Stats())
	for _, q := range seqs {
		p, ok := ix.Lookup(tenant, q)
		s += fmt.Sprintf("|%v pin=%d tr=%v lease=%q prio=%d", ok, p.PinCount, p.Transient, p.Lease, p.Priority)
	}
	return s
}
