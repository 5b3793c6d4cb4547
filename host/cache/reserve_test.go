package cache

import (
	"errors"
	"testing"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Slots handed to running requests count as used: with 8 pages committed
// (under the high watermark of 12) and 6 slots reserved, the plan evicts
// down to the low watermark (8) counting the reservation, so 6 pages go.
func TestReservedSlotsDriveEviction(t *testing.T) {
	h := newHarness(t) // device 16 pages: high 12, low 8; write policy none
	h.fill("a", 8, 0)
	if ts := h.plan(); len(ts) != 0 {
		t.Fatalf("planned %v under the high watermark", ts)
	}
	if err := h.ix.Reserve(tier.Device, 6); err != nil {
		t.Fatal(err)
	}
	ts := h.plan()
	if c, d := kinds(ts); c != 0 || d != 6 {
		t.Fatalf("planned %d copies %d drops, want 6 drops (8 pages + 6 reserved down to 8)", c, d)
	}
	h.complete(ts)
	if st := h.ix.Stats().Tiers[tier.Device]; st.Pages != 2 || st.Reserved != 6 {
		t.Fatalf("stats %+v, want 2 pages and 6 reserved", st)
	}
	// Committing the reserved slots: the caller unreserves as the pages
	// become resident, and usage stays what it was.
	if err := h.ix.Unreserve(tier.Device, 6); err != nil {
		t.Fatal(err)
	}
	h.fill("a", 6, 90000)
	if ts := h.plan(); len(ts) != 0 {
		t.Fatalf("planned %v at 8 used pages", ts)
	}
}

func TestReserveRejectsBadArguments(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"negative", func() error { return h.ix.Reserve(tier.Device, -1) }},
		{"bad tier", func() error { return h.ix.Reserve(tier.Tier(9), 1) }},
		{"unreserve more than reserved", func() error { return h.ix.Unreserve(tier.Device, 1) }},
	} {
		if err := c.fn(); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%s: %v, want ErrBadArgument", c.name, err)
		}
	}
	if err := h.ix.Reserve(tier.Host, 3); err != nil {
		t.Fatal(err)
	}
	if err := h.ix.Unreserve(tier.Host, 4); !errors.Is(err, ErrBadArgument) || h.ix.Reserved(tier.Host) != 3 {
		t.Fatalf("over-release: %v, %d reserved", err, h.ix.Reserved(tier.Host))
	}
	// Reset forgets pages, not the slots running requests hold.
	h.ix.Reset()
	if h.ix.Reserved(tier.Host) != 3 {
		t.Fatalf("reset dropped reservations: %d", h.ix.Reserved(tier.Host))
	}
}
