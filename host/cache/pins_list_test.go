package cache

import (
	"testing"
	"time"
)

// Replaying Pins into a fresh index rebuilds the same pin state.
func TestPinsRoundTrip(t *testing.T) {
	h := newHarness(t)
	a := h.commit("a", tokens(0, 4*testPage)).Sequence
	b := h.commit("a", cat(tokens(0, 2*testPage), tokens(900, 2*testPage))).Sequence // shares 2 pages with a
	for _, p := range []struct {
		seq uint64
		ttl time.Duration
	}{{a[3], time.Hour}, {a[3], time.Minute}, {b[3], 2 * time.Hour}, {a[1], 30 * time.Second}} {
		if _, err := h.ix.Pin(TargetHashes("a", p.seq), p.ttl); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(10 * time.Second)
	recs := h.ix.Pins(h.clock.Now())

	h2 := newHarness(t)
	h2.clock.Advance(h.clock.Now() - h2.clock.Now()) // same clock reading
	h2.commit("a", tokens(0, 4*testPage))
	h2.commit("a", cat(tokens(0, 2*testPage), tokens(900, 2*testPage)))
	for _, r := range recs {
		if err := h2.ix.RestorePin(TargetHashes(r.Tenant, r.Seq), r.Count, r.TTL, r.Expiry); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range append(append([]uint64{}, a...), b...) {
		p1, p2 := h.info("a", s), h2.info("a", s)
		if p1.PinCount != p2.PinCount || p1.PinExpiry != p2.PinExpiry || p1.PinTTL != p2.PinTTL {
			t.Errorf("page %d: before %d/%v/%v, restored %d/%v/%v", s, p1.PinCount, p1.PinExpiry, p1.PinTTL, p2.PinCount, p2.PinExpiry, p2.PinTTL)
		}
	}
	if err := h2.ix.Check(); err != nil {
		t.Fatal(err)
	}
}
