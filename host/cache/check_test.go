package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// TestCheckDetectsCorruption proves the checker can fail: each case breaks
// one invariant by hand and Check must report it.
func TestCheckDetectsCorruption(t *testing.T) {
	cases := map[string]func(h *harness, leaf, mid *node){
		"ancestor not resident": func(h *harness, leaf, mid *node) {
			mid.resident = mid.resident.with(tier.Disk)
			h.ix.resident[tier.Disk]++
			mid.resident = TierSet(0).with(tier.Disk)
			h.ix.resident[tier.Device]--
		},
		"resident nowhere":     func(h *harness, leaf, mid *node) { leaf.resident = 0; h.ix.resident[tier.Device]-- },
		"resident counter":     func(h *harness, leaf, mid *node) { h.ix.resident[tier.Host]++ },
		"pin counter":          func(h *harness, leaf, mid *node) { h.ix.pinnedPages++ },
		"pin underflow":        func(h *harness, leaf, mid *node) { leaf.pinCount-- },
		"lock above parent":    func(h *harness, leaf, mid *node) { leaf.lockRef++ },
		"seq map":              func(h *harness, leaf, mid *node) { delete(leaf.tenant.bySeq, leaf.seq) },
		"bad chain":            func(h *harness, leaf, mid *node) { leaf.local++ },
		"children count":       func(h *harness, leaf, mid *node) { mid.childrenOn[tier.Device]++ },
		"pending count":        func(h *harness, leaf, mid *node) { leaf.pending++ },
		"lease refs":           func(h *harness, leaf, mid *node) { mid.w().leaseRefs++ },
		"stale location":       func(h *harness, leaf, mid *node) { leaf.loc[tier.Remote] = 9 },
		"pin budget":           func(h *harness, leaf, mid *node) { h.ix.pinBudget = 0 },
		"tenant quota":         func(h *harness, leaf, mid *node) { leaf.tenant.quota = 1 },
		"unpinned with expiry": func(h *harness, leaf, mid *node) { leaf.w().pinExpiry = time.Hour },
		"depth":                func(h *harness, leaf, mid *node) { leaf.depth = 9 },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			hs := h.commit("a", tokens(0, 3*testPage))
			if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[1]), time.Hour); err != nil {
				t.Fatal(err)
			}
			ts := h.ix.tenant("a")
			leaf, mid := ts.bySeq[hs.Sequence[2]], ts.bySeq[hs.Sequence[1]]
			if err := h.ix.Check(); err != nil {
				t.Fatalf("clean index fails the check: %v", err)
			}
			corrupt(h, leaf, mid)
			if err := h.ix.Check(); err == nil {
				t.Fatal("Check missed the corruption")
			}
		})
	}
}

// TestCompleteDropRechecksProtection: protection gained after planning
// still stops the drop.
func TestCompleteDropRechecksProtection(t *testing.T) {
	for _, protect := range []string{"pin", "lease"} {
		t.Run(protect, func(t *testing.T) {
			h := newHarness(t)
			hs := h.commit("a", tokens(0, testPage))
			h.ix.cfg.Tiers[tier.Device].High, h.ix.cfg.Tiers[tier.Device].Low = 0, 0
			ts := h.plan()
			if len(ts) != 1 || ts[0].Kind != Drop {
				t.Fatalf("plan %v", ts)
			}
			var err error
			if protect == "pin" {
				_, err = h.ix.Pin(TargetHashes("a", hs.Sequence[0]), time.Hour)
			} else {
				_, _, err = h.ix.Pause(TargetHashes("a", hs.Sequence[0]), "l", tier.Disk, time.Hour)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = h.ix.CompleteDrop(ts[0])
			if protect == "pin" {
				wantErr(t, err, ErrPinned)
			} else {
				wantErr(t, err, ErrLeased)
			}
			if !h.ix.Contains("a", hs.Sequence[0]) {
				t.Fatal("protected page dropped")
			}
			h.check()
		})
	}
}
