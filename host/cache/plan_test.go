package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// fill commits n single-page prompts (distinct first pages) and returns
// their sequence hashes, advancing the clock between them so LRU order is
// commit order.
func (h *harness) fill(tenant string, n, base int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = h.commit(tenant, tokens(base+i*1000, testPage)).Sequence[0]
		h.clock.Advance(time.Millisecond)
	}
	return out
}

func kinds(ts []Transition) (copies, drops int) {
	for _, t := range ts {
		if t.Kind == Copy {
			copies++
		} else {
			drops++
		}
	}
	return
}

func TestPlanNeverDropsPinnedLastCopy(t *testing.T) {
	// No host tier: a pinned device page has nowhere to go and must stay.
	h := newHarness(t, func(c *Config) {
		c.Tiers[tier.Host] = TierConfig{}
		c.Tiers[tier.Disk] = TierConfig{}
	})
	hs := h.commit("a", tokens(1, 2*testPage))
	if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[1]), time.Hour); err != nil {
		t.Fatal(err)
	}
	h.fill("a", 12, 7000)
	h.ix.cfg.Tiers[tier.Device].Low = 0
	for _, tr := range h.plan() {
		if tr.Seq == hs.Sequence[0] || tr.Seq == hs.Sequence[1] {
			t.Fatalf("planned %v on a pinned page with no colder tier", tr)
		}
	}
}

func TestTransientNeverBackedUp(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteBack })
	hs := h.commit("a", tokens(1, 2*testPage))
	if _, err := h.ix.MarkTransient(TargetHashes("a", hs.Sequence[1]), true); err != nil {
		t.Fatal(err)
	}
	h.ix.cfg.Tiers[tier.Device].High, h.ix.cfg.Tiers[tier.Device].Low = 0, 0
	ts := h.plan()
	for _, tr := range ts {
		if tr.Seq == hs.Sequence[1] && tr.Kind == Copy {
			t.Fatalf("planned %v for a transient page", tr)
		}
	}
	if errs := h.complete(ts); len(errs) != 0 {
		t.Fatal(errs)
	}
	if h.ix.Contains("a", hs.Sequence[1]) {
		t.Fatal("transient page survived device eviction")
	}
	if pi := h.info("a", hs.Sequence[0]); !pi.Tiers.Has(tier.Host) || pi.Tiers.Has(tier.Device) {
		t.Fatalf("write-back should have moved the ordinary page to host: %+v", pi)
	}
}

func TestWriteBackCopiesMissingAncestors(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteBack })
	chain := h.commit("a", tokens(0, 13*testPage))
	ts := h.plan()
	// The leaf's demotion needs the whole path on host: 13 copies, one
	// drop (the rest of the path is not a device leaf until it is dropped).
	copies, drops := kinds(ts)
	if copies != 13 || drops < 1 {
		t.Fatalf("planned %d copies, %d drops: %v", copies, drops, ts)
	}
	if ts[0].Seq != chain.Sequence[0] || ts[0].After != 0 {
		t.Fatalf("first copy should be the root page with no dependency: %v", ts[0])
	}
	for i := 1; i < 13; i++ {
		if ts[i].After != ts[i-1].ID {
			t.Fatalf("copy %d does not wait for its parent's: %v", i, ts[i])
		}
	}
	h.ix.DrainEvents(nil)
	if errs := h.complete(ts); len(errs) != 0 {
		t.Fatal(errs)
	}
	// stored(host) comes before removed(device) for the moved page.
	evs := h.ix.DrainEvents(nil)
	leaf := chain.Sequence[12]
	storedAt, removedAt := -1, -1
	for i, e := range evs {
		if e.Seq == leaf && e.Kind == Stored && e.Tier == tier.Host {
			storedAt = i
		}
		if e.Seq == leaf && e.Kind == Removed && e.Tier == tier.Device {
			removedAt = i
		}
	}
	if storedAt < 0 || removedAt < storedAt {
		t.Fatalf("move events out of order: stored %d removed %d in %v", storedAt, removedAt, evs)
	}
}

func TestWriteThroughThenEvictDrops(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	hs := h.commit("a", tokens(0, 3*testPage))
	ts := h.plan()
	if c, d := kinds(ts); c != 3 || d != 0 || ts[0].Reason != ReasonWriteThrough {
		t.Fatalf("write-through plan %v", ts)
	}
	if ts[1].After != ts[0].ID || ts[2].After != ts[1].ID {
		t.Fatalf("write-through copies must wait for their parents: %v", ts)
	}
	h.complete(ts)
	for _, s := range hs.Sequence {
		if pi := h.info("a", s); !pi.Tiers.Has(tier.Host) {
			t.Fatalf("no host copy after write-through: %+v", pi)
		}
	}
	h.fill("a", 12, 50000)
	h.settle(5)
	// Eviction dropped device copies only; every page is still matchable.
	if got := len(h.match("a", tokens(0, 3*testPage))); got != 3 {
		t.Fatalf("matched %d after eviction under write-through", got)
	}
}

func TestCompletionValidation(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteBack })
	hs := h.commit("a", tokens(0, 2*testPage))
	h.ix.cfg.Tiers[tier.Device].High, h.ix.cfg.Tiers[tier.Device].Low = 0, 0
	ts := h.plan() // copy root, copy leaf, drop leaf (after its copy)
	if len(ts) != 3 || ts[2].Kind != Drop || ts[2].After != ts[1].ID {
		t.Fatalf("unexpected plan %v", ts)
	}
	// The drop cannot overtake its copy.
	wantErr(t, h.ix.CompleteDrop(ts[2]), ErrTransitionOrder)
	// Copies must land parent first.
	wantErr(t, h.ix.CompleteCopy(ts[1], 500), ErrNotResident)
	// That copy failed, so the drop waiting for it is cancelled.
	wantErr(t, h.ix.CompleteDrop(ts[2]), ErrTransitionCancelled)
	wantErr(t, h.ix.CompleteDrop(ts[2]), ErrUnknownTransition)
	if err := h.ix.CompleteCopy(ts[0], 501); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h.ix.CompleteCopy(ts[0], 502), ErrUnknownTransition)
	if pi := h.info("a", hs.Sequence[1]); !pi.Tiers.Has(tier.Device) || pi.InFlight != 0 {
		t.Fatalf("leaf after the failed demotion: %+v", pi)
	}
	h.check()

	// A page locked after its drop was planned refuses the drop.
	ts = h.plan()
	var drop Transition
	for _, tr := range ts {
		if tr.Kind == Drop && tr.Seq == hs.Sequence[1] {
			drop = tr
		}
	}
	for _, tr := range ts {
		if tr.Kind == Copy {
			if err := h.ix.CompleteCopy(tr, 600+tr.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := h.ix.Lock("a", hs.Sequence[1]); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h.ix.CompleteDrop(drop), ErrLocked)
	h.check()
	if err := h.ix.FailTransition(drop); err == nil {
		t.Fatal("failing a transition already refused should be unknown")
	}
}

func TestFailTransitionRequeuesWriteThrough(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	h.commit("a", tokens(0, testPage))
	ts := h.plan()
	if len(ts) != 1 {
		t.Fatalf("plan %v", ts)
	}
	if err := h.ix.FailTransition(ts[0]); err != nil {
		t.Fatal(err)
	}
	if again := h.plan(); len(again) != 1 || again[0].Reason != ReasonWriteThrough {
		t.Fatalf("failed write-through was not retried: %v", again)
	}
	wantErr(t, h.ix.FailTransition(ts[0]), ErrUnknownTransition)
}

// FailTransitions fails each transition as FailTransition would, with
// one error each: the write-throughs are queued again, and one reported
// twice is unknown the second time.
func TestFailTransitionsFailsEach(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	h.commit("a", tokens(0, 3*testPage))
	ts := h.plan()
	if len(ts) != 3 {
		t.Fatalf("plan %v", ts)
	}
	errs := h.ix.FailTransitions([]Transition{ts[2], ts[0], ts[1], ts[0]})
	for i, err := range errs[:3] {
		if err != nil {
			t.Fatalf("transition %d: %v", i, err)
		}
	}
	wantErr(t, errs[3], ErrUnknownTransition)
	if h.ix.InFlight() != 0 {
		t.Fatalf("%d transitions still in flight", h.ix.InFlight())
	}
	h.check()
	if again := h.plan(); len(again) != 3 {
		t.Fatalf("failed write-throughs were not retried: %v", again)
	}
}

func TestDropRemovedPageCancels(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	hs := h.commit("a", tokens(0, 2*testPage))
	ts := h.plan()
	if _, err := h.ix.PruneDescendants(TargetHashes("a", hs.Sequence[0])); err != nil {
		t.Fatal(err)
	}
	if err := h.ix.CompleteCopy(ts[0], 1); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h.ix.CompleteCopy(ts[1], 2), ErrTransitionCancelled)
	h.check()
}
