package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func dialConnector(t *testing.T, socket, engineID string, l enginewire.Layout) (*engineclient.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := engineclient.Dial(ctx, engineclient.Options{Socket: socket, EngineID: engineID, Layout: l,
		Rope: engineclient.RopeConfig{Base: 10000}, Connector: true})
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// dialSchedulerAndWorker registers two processes of one connector-mode
// engine, as vLLM's scheduler and worker do.
func dialSchedulerAndWorker(t *testing.T, socket, engineID string, l enginewire.Layout) (sched, worker *engineclient.Client) {
	t.Helper()
	var err error
	if sched, err = dialConnector(t, socket, engineID, l); err != nil {
		t.Fatal(err)
	}
	if worker, err = dialConnector(t, socket, engineID, l); err != nil {
		t.Fatal(err)
	}
	return sched, worker
}

// vLLM runs its connector twice, in the scheduler and in each worker: the
// processes share one registration, so a request matched by the scheduler
// is saved by the worker, and a fresh process of a later engine reads the
// same bytes back through its own staging mapping.
func TestConnectorProcessesShareOneRegistration(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	l := gqa(16)
	sched, worker := dialSchedulerAndWorker(t, h.Socket, "vllm-1", l)
	rs, rw := sched.Registration(), worker.Registration()
	if rs.ID != rw.ID || rs.Joined || !rw.Joined {
		t.Fatalf("scheduler %+v, worker %+v: want one registration, joined by the worker", rs, rw)
	}
	if !worker.Device().Staging || !worker.Device().Mapped() {
		t.Fatalf("worker's device arena: staging %v mapped %v", worker.Device().Staging, worker.Device().Mapped())
	}

	ctx := ctxT(t)
	toks := seq(500, 16*3+4)
	m, err := sched.Match(ctx, engineclient.MatchRequest{Session: "s", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := worker.Allocate(ctx, m.RequestID, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range slots {
		fillPage(t, worker.Device(), sl, tagByPage(i))
	}
	com, err := worker.Commit(ctx, m.RequestID, toks, slots)
	if err != nil {
		t.Fatal(err)
	}
	// The engine keeps its own copy: committed staging pages are not held
	// for the rest of the request (the staging tier holds pages in flight).
	for i, seq := range com.BlockHashes {
		if p, ok := h.Page("", seq); !ok || p.LockRef != 0 {
			t.Fatalf("committed page %d after the commit: %+v (found %v), want unlocked", i, p, ok)
		}
	}
	// The request's prefix is still its own to pin at Finish.
	fin, err := sched.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControlJSON: `{"type":"ephemeral","ttl":"5m"}`})
	if err != nil || !fin.Pinned || fin.PinnedBlocks != 3 {
		t.Fatalf("finish with cache_control: %+v %v; want 3 pages pinned", fin, err)
	}
	if s, ok := h.Service.Session("s"); !ok || s.CachedTokens != 48 {
		t.Fatalf("session after the commit: %+v %v; want 48 cached tokens", s, ok)
	}

	// A new engine instance (another engine_id) replaces the registration.
	next, err := dialConnector(t, h.Socket, "vllm-2", l)
	if err != nil {
		t.Fatal(err)
	}
	if r := next.Registration(); r.ID == rs.ID || r.Joined || !r.Reattached {
		t.Fatalf("new engine instance: %+v", r)
	}
	m2, err := next.Match(ctx, engineclient.MatchRequest{Session: "s2", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if m2.CachedTokens != 48 {
		t.Fatalf("new instance matched %d tokens, want 48", m2.CachedTokens)
	}
	for i, sl := range m2.PageSlots {
		checkPage(t, next.Device(), sl, tagByPage(i))
	}
	if _, err := next.Release(ctx, m2.RequestID); err != nil {
		t.Fatal(err)
	}
}

// A connector stages pages through the device tier and relies on the host
// tier keeping them: a host that writes nothing through refuses it at
// registration, naming the setting.
func TestConnectorRefusedWithoutWriteThrough(t *testing.T) {
	h := startHost(t, enginetest.Options{WritePolicy: "none"})
	_, err := dialConnector(t, h.Socket, "vllm-1", gqa(16))
	e, ok := errcode.As(err)
	if !ok || e.Code != errcode.LayoutConflict || !strings.Contains(err.Error(), "index.write_policy") {
		t.Fatalf("connector on a write-policy-none host: %v", err)
	}
	// Arena mode is unaffected.
	dial(t, h.Socket, gqa(16))
}
