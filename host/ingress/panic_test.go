//go:build invariants

package ingress

import (
	"context"
	"testing"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A panic inside the index while a directive is applied is answered as
// internal, audited and counted, whatever door sent it (NATS and the
// policies have no recovery of their own); the lock is released and the
// turn's journal rolled back on the way up, so the same directive sent
// again is applied.
func TestPanicInTheIndexIsAnsweredAndTheNextCallServed(t *testing.T) {
	e := newEnv(t, nil)
	h := blockid.Compute([]uint32{1, 2, 3, 4}, 4, blockid.Salt{Namespace: "acme"})
	e.g.Do(func(ix *cache.Index) {
		var res cache.CommitResult
		if err := ix.Commit("acme", h, []uint64{0}, &res); err != nil {
			t.Fatal(err)
		}
	})
	pin := directive.Turn{ID: "t", Source: "src", Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[0])}, Pin: true}}}
	cc := directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: pin.Directives[0].(directive.Cache).BlockHashes}
	pinCount := func() (n int) {
		e.g.Do(func(ix *cache.Index) { p, _ := ix.Lookup("acme", h.Sequence[0]); n = p.PinCount })
		return n
	}

	e.g.Do(func(ix *cache.Index) { ix.PanicAfterNext("Pin") })
	r := e.in.Apply(context.Background(), pin)
	if r.OK() || r.Error == nil || r.Error.Code != errcode.Internal || len(r.Results) != 1 || r.Results[0].Error.Code != errcode.Internal {
		t.Fatalf("turn that panicked: %+v", r)
	}
	if n := pinCount(); n != 0 {
		t.Fatalf("the panicked turn left pin count %d: its journal was not rolled back", n)
	}
	if recs := e.ring.Records(); len(recs) != 1 || recs[0].Code != errcode.Internal || recs[0].Source != "src" {
		t.Fatalf("audit of the panicked turn: %+v", recs)
	}
	if n := counter(t, e.m.Directives.WithLabelValues("Cache", "internal")); n != 1 {
		t.Errorf("panicked pins counted %v times, want 1", n)
	}
	if r := e.in.Apply(context.Background(), pin); !r.OK() || pinCount() != 1 {
		t.Fatalf("the turn after the panic: %+v, pin count %d", r, pinCount())
	}

	e.g.Do(func(ix *cache.Index) { ix.PanicAfterNext("Pin") })
	if rep := e.in.CacheControl(context.Background(), "src", "acme", cc); rep.Code != errcode.Internal {
		t.Fatalf("cache_control that panicked: %+v", rep)
	}
	if n := counter(t, e.m.Directives.WithLabelValues("pin_blocks", "internal")); n != 1 {
		t.Errorf("panicked cache_control counted %v times, want 1", n)
	}
	if rep := e.in.CacheControl(context.Background(), "src", "acme", cc); rep.Status != directive.StatusOK || pinCount() != 2 {
		t.Fatalf("the cache_control after the panic: %+v, pin count %d", rep, pinCount())
	}
}
