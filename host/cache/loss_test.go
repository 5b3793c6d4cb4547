package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// TestLoseCopyTakesTheSubtree: a host copy found bad takes the host copies
// of the page's descendants with it (prefix closure); pages still on the
// device stay indexed and are queued for write-through again.
func TestLoseCopyTakesTheSubtree(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	hs := h.commit("a", tokens(0, 4*testPage))
	side := h.commit("a", cat(tokens(0, 2*testPage), tokens(500, testPage))) // a branch off page 1
	h.settle(4)
	h.ix.DrainEvents(nil)
	res, err := h.ix.LoseCopy("a", hs.Sequence[1], tier.Host)
	if err != nil {
		t.Fatal(err)
	}
	if res.Copies != 4 || res.Removed != 0 || res.Lost != 0 || len(res.Freed) != 4 {
		t.Fatalf("result %+v, want the host copies of pages 1, 2, 3 and the branch", res)
	}
	if res.Freed[len(res.Freed)-1].Seq != hs.Sequence[1] {
		t.Fatalf("freed %v: the page itself should go last, after its descendants", res.Freed)
	}
	evs := h.ix.DrainEvents(nil)
	if len(evs) != 4 {
		t.Fatalf("events %v", evs)
	}
	for _, e := range evs {
		if e.Kind != Removed || e.Tier != tier.Host {
			t.Fatalf("event %+v", e)
		}
	}
	if pi := h.info("a", hs.Sequence[0]); !pi.Tiers.Has(tier.Host) {
		t.Fatalf("the parent lost its host copy: %+v", pi)
	}
	for _, s := range append(hs.Sequence[1:], side.Sequence[2]) {
		if pi := h.info("a", s); pi.Tiers.Has(tier.Host) || !pi.Tiers.Has(tier.Device) {
			t.Fatalf("page %d: %+v", s, pi)
		}
	}
	// The device copies get their host copies again.
	ts := h.plan()
	if c, d := kinds(ts); c != 4 || d != 0 || ts[0].Seq != hs.Sequence[1] {
		t.Fatalf("write-through after the loss: %v", ts)
	}
	if errs := h.complete(ts); len(errs) != 0 {
		t.Fatal(errs)
	}
	for _, s := range hs.Sequence {
		if pi := h.info("a", s); !pi.Tiers.Has(tier.Host) {
			t.Fatalf("page %d has no host copy after the retry", s)
		}
	}
}

// TestLoseLastCopyOfProtectedPages: a paused, pinned and locked path whose
// only copy (on disk) is found corrupt leaves the index, and the loss is
// counted, not hidden; locks through it are released from its ancestors.
func TestLoseLastCopyOfProtectedPages(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, 3*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("a", hs.Sequence[2]), "l", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle(6)
	if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[2]), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ix.Lock("a", hs.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ix.Lock("a", hs.Sequence[0]); err != nil {
		t.Fatal(err)
	}
	for _, s := range hs.Sequence {
		if pi := h.info("a", s); pi.Tiers != TierSet(0).with(tier.Disk) {
			t.Fatalf("page %d not on disk alone: %+v", s, pi)
		}
	}
	res, err := h.ix.LoseCopy("a", hs.Sequence[1], tier.Disk)
	if err != nil {
		t.Fatal(err)
	}
	if res.Copies != 2 || res.Removed != 2 || res.Pinned != 2 || res.Leased != 2 || res.Locked != 2 || res.Lost != 2 {
		t.Fatalf("result %+v", res)
	}
	if h.ix.Contains("a", hs.Sequence[1]) || h.ix.Contains("a", hs.Sequence[2]) {
		t.Fatal("lost pages still indexed")
	}
	root := h.info("a", hs.Sequence[0])
	if root.LockRef != 1 || root.PinCount != 1 {
		t.Fatalf("root after the loss: %+v (its own lock and pin stay)", root)
	}
	_, err = h.ix.Unlock("a", hs.Sequence[2])
	wantErr(t, err, ErrUnknownBlock)
	if _, err := h.ix.Unlock("a", hs.Sequence[0]); err != nil {
		t.Fatal(err)
	}
	if st := h.ix.Stats(); st.PinnedPages != 1 || st.Pages != 1 {
		t.Fatalf("stats %+v", st)
	}
	if li, ok := h.ix.Lease("l"); !ok || li.Pages != 1 {
		t.Fatalf("lease %+v", li)
	}
	h.check()
}

// TestLoseCopyCancelsItsTransitions: planned work reading or dropping the
// lost copy is cancelled, so the mover neither copies garbage nor frees a
// slot the loss already freed.
func TestLoseCopyCancelsItsTransitions(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, 2*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("a", hs.Sequence[1]), "l", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle(6)
	fetch, _, err := h.ix.PlanFetch(TargetHashes("a", hs.Sequence[1]), tier.Host, nil)
	if err != nil || len(fetch) != 2 {
		t.Fatalf("fetch %v %v", fetch, err)
	}
	if _, err := h.ix.LoseCopy("a", hs.Sequence[0], tier.Disk); err != nil {
		t.Fatal(err)
	}
	for _, tr := range fetch {
		wantErr(t, h.ix.CompleteCopy(tr, 77), ErrTransitionCancelled)
	}
	if h.ix.InFlight() != 0 {
		t.Fatalf("%d in flight", h.ix.InFlight())
	}

	// A planned drop of a copy that is then lost.
	h2 := newHarness(t, func(c *Config) {
		c.DeviceWrite = WriteThrough
		c.Tiers[tier.Device].High = 1
	})
	hs = h2.commit("a", tokens(0, 13*testPage))
	h2.settle(3) // write-through: 13 pages on device and host
	h2.ix.cfg.Tiers[tier.Device].High = 0.5
	ts := h2.plan()
	if len(ts) == 0 || ts[0].Kind != Drop || ts[0].From != tier.Device {
		t.Fatalf("plan %v", ts)
	}
	if _, err := h2.ix.LoseCopy("a", ts[0].Seq, tier.Device); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h2.ix.CompleteDrop(ts[0]), ErrTransitionCancelled)
	if err := h2.ix.CompleteDrop(ts[1]); err != nil {
		t.Fatalf("the parent's drop no longer waits for the lost child: %v", err)
	}
	h2.check()
}

// TestLoseCopyUnsettlesLease: a paused page warmed back to host that loses
// its pause copy must be paused again.
func TestLoseCopyUnsettlesLease(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, 2*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("a", hs.Sequence[1]), "l", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle(6)
	fetch, _, err := h.ix.PlanFetch(TargetHashes("a", hs.Sequence[1]), tier.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	if errs := h.complete(fetch); len(errs) != 0 {
		t.Fatal(errs)
	}
	if _, err := h.ix.LoseCopy("a", hs.Sequence[1], tier.Disk); err != nil {
		t.Fatal(err)
	}
	if li, _ := h.ix.Lease("l"); li.Settled {
		t.Fatal("lease still settled with a page missing from its tier")
	}
	h.settle(6)
	if pi := h.info("a", hs.Sequence[1]); pi.Tiers != TierSet(0).with(tier.Disk) {
		t.Fatalf("page not paused again: %+v", pi)
	}
	if li, _ := h.ix.Lease("l"); !li.Settled {
		t.Fatalf("lease %+v", li)
	}
}

func TestLoseCopyRejects(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, testPage))
	_, err := h.ix.LoseCopy("a", 4242, tier.Device)
	wantErr(t, err, ErrUnknownBlock)
	_, err = h.ix.LoseCopy("b", hs.Sequence[0], tier.Device)
	wantErr(t, err, ErrUnknownBlock)
	_, err = h.ix.LoseCopy("a", hs.Sequence[0], tier.Host)
	wantErr(t, err, ErrNotResident)
	_, err = h.ix.LoseCopy("a", hs.Sequence[0], tier.Tier(9))
	wantErr(t, err, ErrBadArgument)
	if pi := h.info("a", hs.Sequence[0]); !pi.Tiers.Has(tier.Device) {
		t.Fatalf("a refused loss changed the page: %+v", pi)
	}
	h.check()
}
