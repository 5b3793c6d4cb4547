package daemon

import (
	"context"
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
	reply := d.Executor().Apply(context.Background(), directive.Turn{Source: "test", Tenant: "acme",
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
