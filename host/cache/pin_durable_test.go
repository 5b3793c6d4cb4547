package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// A pinned path is copied to the disk tier (the one tier a restart keeps),
// parents first; a failed copy is tried again only after a backoff.
func TestPinnedPagesAreWrittenToDisk(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 3*testPage))
	h.commit("a", tokens(500, 2*testPage)) // not pinned: stays where it is
	if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[2]), time.Hour); err != nil {
		t.Fatal(err)
	}
	ts := h.plan()
	pinCopies := 0
	for _, tr := range ts {
		if tr.Reason == ReasonPin && tr.Kind == Copy && tr.To == tier.Disk {
			pinCopies++
		}
		if err := h.ix.FailTransition(tr); err != nil {
			t.Fatal(err)
		}
	}
	if pinCopies == 0 {
		t.Fatal("no disk copy planned for a pinned page")
	}
	if ts := h.plan(); len(ts) != 0 {
		t.Fatalf("planned %v again at once after a failure", ts)
	}
	h.clock.Advance(leaseRetryBase)
	h.settle(10)
	for _, s := range hs.Sequence {
		if p := h.info("a", s); !p.Tiers.Has(tier.Disk) {
			t.Fatalf("pinned page %d not on disk: %+v", s, p)
		}
	}
	if st := h.ix.Stats(); st.Tiers[tier.Disk].Pages != 3 {
		t.Fatalf("disk holds %d pages, want the 3 pinned", st.Tiers[tier.Disk].Pages)
	}
}
