package cache

import (
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// A Pause whose tier cannot take its pages, even after that tier's eviction
// rules, is refused whole and at once, naming the tier; one that fits by
// evicting ordinary pages there is granted, and Plan makes the room.
func TestPauseRefusedWhenItsTierIsFull(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Tiers[tier.Disk] = TierConfig{Capacity: 4, High: 0.9, Low: 0.5, PinFraction: 0.5} })
	a := h.commit("t", tokens(0, 4*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("t", a.Sequence[3]), "A", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle(20)
	if li, _ := h.ix.Lease("A"); !li.Settled {
		t.Fatalf("lease A: %+v", li)
	}
	b := h.commit("t", tokens(1000, 2*testPage))
	_, _, err := h.ix.Pause(TargetHashes("t", b.Sequence[1]), "B", tier.Disk, time.Hour)
	wantErr(t, err, ErrCapacity)
	if !strings.Contains(err.Error(), "tier disk") {
		t.Errorf("refusal does not name the tier: %v", err)
	}
	if _, ok := h.ix.Lease("B"); ok {
		t.Fatal("a refused pause recorded its lease")
	}

	// Once A is revoked, A's pages are gone; fill the disk with ordinary
	// (evictable) copies, and B fits by evicting them.
	if _, err := h.ix.RevokeLease("A"); err != nil {
		t.Fatal(err)
	}
	c := h.commit("t", tokens(2000, 4*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("t", c.Sequence[3]), "C", tier.Disk, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h.settle(20)
	h.clock.Advance(time.Second)
	h.ix.Sweep(h.clock.Now()) // C lapses: its disk copies are ordinary pages
	if _, _, err := h.ix.Pause(TargetHashes("t", b.Sequence[1]), "B", tier.Disk, time.Hour); err != nil {
		t.Fatalf("a pause that eviction makes room for: %v", err)
	}
	h.settle(20)
	if li, _ := h.ix.Lease("B"); !li.Settled || li.Degraded {
		t.Fatalf("lease B: %+v", li)
	}
}

// Pause copies that keep failing back off on the index's clock, then
// degrade the lease: its device pages become evictable instead of holding
// the device, and a later success makes it healthy again.
func TestFailingPauseBacksOffAndDegrades(t *testing.T) {
	h := newHarness(t)
	a := h.commit("t", tokens(0, 3*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("t", a.Sequence[2]), "A", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	fail := func() int {
		t.Helper()
		n := 0
		for _, tr := range h.plan() {
			if tr.Reason == ReasonPause {
				n++
			}
			if err := h.ix.FailTransition(tr); err != nil {
				t.Fatal(err)
			}
			h.check()
		}
		return n
	}
	wait := leaseRetryBase
	for i := 1; i <= leaseDegradeAfter; i++ {
		if n := fail(); n == 0 {
			t.Fatalf("attempt %d planned no pause copy", i)
		}
		if n := fail(); n != 0 {
			t.Fatalf("attempt %d: planned %d pause copies again at once, without backing off", i, n)
		}
		if i < leaseDegradeAfter {
			h.clock.Advance(wait)
			wait *= 2
		}
	}
	li, _ := h.ix.Lease("A")
	if !li.Degraded || !strings.Contains(li.Reason, "disk") {
		t.Fatalf("after %d failed attempts: %+v", leaseDegradeAfter, li)
	}
	if got := h.ix.DegradedLeases(); len(got) != 1 || got[0].ID != "A" {
		t.Fatalf("DegradedLeases: %+v", got)
	}
	// The degraded lease's pages are evictable: while it backs off, a flood
	// of other pages takes the device from them.
	for i := 0; i < 4; i++ {
		h.commit("t", tokens(1000+100*i, 3*testPage))
	}
	evicted := false
	for round := 0; round < 5 && !evicted; round++ {
		for _, tr := range h.plan() {
			if tr.Kind == Drop && tr.From == tier.Device && tr.Reason == ReasonEvict {
				for _, s := range a.Sequence {
					evicted = evicted || tr.Seq == s
				}
			}
			var err error
			switch {
			case tr.Reason == ReasonPause && tr.Kind == Copy:
				err = h.ix.FailTransition(tr)
			case tr.Kind == Copy:
				h.loc++
				err = h.ix.CompleteCopy(tr, h.loc)
			default:
				err = h.ix.CompleteDrop(tr)
			}
			if err != nil {
				t.Fatal(err)
			}
			h.check()
		}
	}
	if !evicted {
		t.Fatal("device eviction spared the degraded lease's pages")
	}
}

// A degraded lease that settles on a later attempt holds its pages again.
func TestDegradedLeaseRecovers(t *testing.T) {
	h := newHarness(t)
	a := h.commit("t", tokens(0, 2*testPage))
	if _, _, err := h.ix.Pause(TargetHashes("t", a.Sequence[1]), "A", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < leaseDegradeAfter; i++ {
		for _, tr := range h.plan() {
			if err := h.ix.FailTransition(tr); err != nil {
				t.Fatal(err)
			}
		}
		h.clock.Advance(leaseRetryMax)
	}
	if li, _ := h.ix.Lease("A"); !li.Degraded {
		t.Fatalf("lease not degraded: %+v", li)
	}
	h.settle(20)
	if li, _ := h.ix.Lease("A"); !li.Settled || li.Degraded || li.Reason != "" {
		t.Fatalf("after a successful attempt: %+v", li)
	}
}
