package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// A pin and a pause reach meta.db soon after they apply, not at the next
// sweep (an hour away here) or at shutdown: a host killed right after
// answering keeps them.
func TestAppliedPinsAndLeasesPersistPromptly(t *testing.T) {
	c := modelConfig(t)
	c.Index.SweepInterval = time.Hour
	d, stop := start(t, c)
	defer stop()
	h, _ := commitPages(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	reply := d.core.in.Apply(context.Background(), directive.Turn{Source: "test", Tenant: "acme",
		Directives: []directive.Directive{
			directive.Cache{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[0])}, Pin: true, TTL: directive.TTLOf(time.Hour)},
			directive.Pause{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[1])}, TTL: directive.TTLOf(time.Hour), LeaseID: "l1"},
		}})
	if !reply.OK() {
		t.Fatalf("pin and pause refused: %+v", reply)
	}
	waitFor(t, "the pin and the lease in meta.db", func() bool {
		snap, err := d.meta.store.Load()
		return err == nil && len(snap.Pins) > 0 && len(snap.Leases) == 1 && snap.Leases[0].ID == "l1"
	})
}

// A pin whose save to meta.db fails is still applied (its pages are
// pinned), and its ok reply says that a restart now would lose it, so the
// caller knows without resending it.
func TestPinNotSavedRepliesWithAWarning(t *testing.T) {
	c := modelConfig(t)
	d, stop := start(t, c)
	defer stop()
	h, _ := commitPages(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	pin := directive.Turn{Source: "test", Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[0])}, Pin: true, TTL: directive.TTLOf(time.Hour)}}}
	if reply := d.core.in.Apply(context.Background(), pin); !reply.OK() || reply.Warning != "" {
		t.Fatalf("a saved pin: %+v", reply)
	}
	if err := d.meta.store.Close(); err != nil { // every later save fails
		t.Fatal(err)
	}
	reply := d.core.in.Apply(context.Background(), pin)
	if !reply.OK() || !strings.Contains(reply.Warning, "could not be saved to disk") {
		t.Fatalf("a pin that could not be saved: %+v", reply)
	}
	p, _ := pageInfo(d, "acme", h.Sequence[0])
	if p.PinCount != 2 {
		t.Fatalf("pin count %d, want 2: the turn applied", p.PinCount)
	}
}
