package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Pages held only in memory are written to disk before a stop, parents
// first and the most recent prompt first, within the disk tier's high
// watermark; transient pages and pages already on disk are left alone.
func TestPersistPlansRecentPagesParentsFirst(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Tiers[tier.Disk] = TierConfig{Capacity: 8, High: 0.75, Low: 0.5, PinFraction: 0.5} })
	old := h.commit("a", tokens(1, 4*testPage))
	h.clock.Advance(time.Second)
	recent := h.commit("a", tokens(100, 4*testPage))
	h.clock.Advance(time.Second)
	think := h.commit("a", tokens(200, 2*testPage))
	if _, err := h.ix.MarkTransient(TargetHashes("a", think.Sequence...), true); err != nil {
		t.Fatal(err)
	}

	ts, res := h.ix.PlanPersist(tier.Disk, nil)
	h.check()
	// Room for 6 pages (0.75 of 8): the recent prompt's 4, then the old
	// one's first 2 (a chain that fits); its last 2 are left.
	if res.Planned != 6 || len(ts) != 6 || res.Left != 2 {
		t.Fatalf("planned %d (%d transitions), left %d; want 6 and 2", res.Planned, len(ts), res.Left)
	}
	for i, s := range recent.Sequence {
		if tr := ts[i]; tr.Seq != s || tr.Kind != Copy || tr.To != tier.Disk || tr.Reason != ReasonPersist {
			t.Fatalf("transition %d is %+v, want the recent prompt's page %d copied to disk", i, tr, i)
		}
	}
	if ts[4].Seq != old.Sequence[0] || ts[5].Seq != old.Sequence[1] {
		t.Fatalf("after the recent prompt: %+v %+v, want the old prompt's first pages", ts[4], ts[5])
	}
	if errs := h.complete(ts); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, s := range think.Sequence {
		if h.info("a", s).Tiers.Has(tier.Disk) {
			t.Fatal("a transient page was written to disk")
		}
	}
	if ts, res := h.ix.PlanPersist(tier.Disk, nil); len(ts) != 0 || res.Left != 2 {
		t.Fatalf("a second plan: %d transitions, left %d", len(ts), res.Left)
	}
}
