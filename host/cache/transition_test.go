package cache

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/tier"
)

// TestFailedWriteThroughRequeuesDependents: when a write-through copy fails,
// the copies of its descendants that waited for it are cancelled; all of
// them, not only the failed page, must be planned again, parents first,
// so one later Plan chains them all.
func TestFailedWriteThroughRequeuesDependents(t *testing.T) {
	for _, how := range []string{"fail", "refused"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
			hs := h.commit("a", tokens(0, 4*testPage))
			ts := h.plan()
			if c, _ := kinds(ts); c != 4 || ts[1].After != ts[0].ID {
				t.Fatalf("write-through plan %v", ts)
			}
			if how == "fail" {
				if err := h.ix.FailTransition(ts[0]); err != nil {
					t.Fatal(err)
				}
			} else {
				// The middle copy lands before its parent's: refused, and the
				// copies below it are cancelled.
				wantErr(t, h.ix.CompleteCopy(ts[1], 900), ErrNotResident)
				if err := h.ix.CompleteCopy(ts[0], 901); err != nil {
					t.Fatal(err)
				}
			}
			// The mover reports the cancelled dependents failed too; that must
			// neither error nor queue them twice.
			for _, tr := range ts[2:] {
				wantErr(t, h.ix.CompleteCopy(tr, 1000+tr.ID), ErrTransitionCancelled)
			}
			h.check()
			again := h.plan()
			want := 4
			if how == "refused" {
				want = 3 // the root page landed
			}
			if c, d := kinds(again); c != want || d != 0 {
				t.Fatalf("retry plan %v, want %d write-through copies", again, want)
			}
			for i, tr := range again {
				if tr.Reason != ReasonWriteThrough {
					t.Fatalf("retry %v", tr)
				}
				if i > 0 && tr.After != again[i-1].ID {
					t.Fatalf("retried copies are not chained parent first: %v", again)
				}
			}
			if errs := h.complete(again); len(errs) != 0 {
				t.Fatal(errs)
			}
			for _, s := range hs.Sequence {
				if pi := h.info("a", s); !pi.Tiers.Has(tier.Host) {
					t.Fatalf("page %d never got its host copy: %+v", s, pi)
				}
			}
			if more := h.plan(); len(more) != 0 {
				t.Fatalf("write-through planned again after landing: %v", more)
			}
		})
	}
}

// TestDropWaitsForChildrenDrops: Plan drops a chain's tail in one plan; a
// parent's drop completed before its child's is out of order, not
// refused, and lands once the child's drop has.
func TestDropWaitsForChildrenDrops(t *testing.T) {
	h := newHarness(t)
	chain := h.commit("a", tokens(0, 13*testPage))
	ts := h.plan() // drops of pages 12..8, deepest first
	if len(ts) != 5 || ts[0].Seq != chain.Sequence[12] || ts[4].Seq != chain.Sequence[8] {
		t.Fatalf("plan %v", ts)
	}
	// Completed shallowest first: each waits for the one below it.
	for i := 4; i >= 1; i-- {
		wantErr(t, h.ix.CompleteDrop(ts[i]), ErrTransitionOrder)
	}
	h.check()
	if h.ix.InFlight() != 5 {
		t.Fatalf("%d in flight: an out-of-order drop was forgotten", h.ix.InFlight())
	}
	for i := 0; i < 5; i++ {
		if err := h.ix.CompleteDrop(ts[i]); err != nil {
			t.Fatalf("drop %d after its children: %v", i, err)
		}
	}
	if got := len(h.match("a", tokens(0, 13*testPage))); got != 8 {
		t.Fatalf("matched %d pages, want 8", got)
	}
	h.check()
}

// TestDropRefusedWhenChildStays: once a child's planned drop fails, its
// parent's drop would wait forever; it is refused instead.
func TestDropRefusedWhenChildStays(t *testing.T) {
	h := newHarness(t)
	chain := h.commit("a", tokens(0, 13*testPage))
	ts := h.plan()
	if err := h.ix.FailTransition(ts[0]); err != nil {
		t.Fatal(err)
	}
	wantErr(t, h.ix.CompleteDrop(ts[1]), ErrHasChildren)
	wantErr(t, h.ix.CompleteDrop(ts[1]), ErrUnknownTransition)
	if pi := h.info("a", chain.Sequence[11]); !pi.Tiers.Has(tier.Device) {
		t.Fatalf("refused drop removed the page: %+v", pi)
	}
	h.check()
}

// TestDropRefusedWhenChildAppears: a page that gained a child on the tier
// after its drop was planned (a new commit) refuses the drop even while
// its other child's drop is still pending.
func TestDropRefusedWhenChildAppears(t *testing.T) {
	h := newHarness(t)
	base := tokens(0, 9*testPage)
	hs := h.commit("a", base)
	h.fill("a", 4, 50000) // 13 pages, newer than the chain: its tail goes first
	ts := h.plan()
	if len(ts) != 5 || ts[0].Seq != hs.Sequence[8] || ts[1].Seq != hs.Sequence[7] {
		t.Fatalf("plan %v", ts)
	}
	wantErr(t, h.ix.CompleteDrop(ts[1]), ErrTransitionOrder)
	h.commit("a", cat(base[:8*testPage], tokens(7777, testPage)))
	wantErr(t, h.ix.CompleteDrop(ts[1]), ErrHasChildren)
	if err := h.ix.CompleteDrop(ts[0]); err != nil {
		t.Fatal(err)
	}
	h.check()
}
