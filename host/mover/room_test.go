package mover

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// A load-back into a full device evicts other, evictable pages to make
// room, instead of failing for want of slots.
func TestLoadBackMakesRoomInFullDevice(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 8, hostPages: 64, diskPgs: 128, deviceHigh: 0.9, deviceLow: 0.5})
	a := h.commit("t", 0, 4)
	h.mv.Step(ctx) // a written through to host
	h.commit("t", 1000, 4)
	for i := 0; i < 20; i++ { // the device is over its high watermark: a, the LRU, goes
		h.mv.Step(ctx)
		if p, _ := h.tiersOf("t", a.seqs[0]); !p.Tiers.Has(tier.Device) {
			break
		}
	}
	if p, _ := h.tiersOf("t", a.seqs[0]); p.Tiers.Has(tier.Device) || !p.Tiers.Has(tier.Host) {
		t.Fatalf("setup: a should be on host only, is on %v", p.Tiers)
	}
	h.commit("t", 2000, 4) // the device pool is full again
	if free := h.pools.Device.Stats().Free; free != 0 {
		t.Fatalf("setup: %d device slots free, want 0", free)
	}
	if _, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("load-back into a full device: %v", err)
	}
	h.verify(a, tier.Device)
	h.check()
}

// MakeRoom frees device slots for a caller that takes them itself (a
// splice's fresh pages) on a device that sits just under its high
// watermark, where the mover's own steps evict nothing.
func TestMakeRoomFreesSlotsBelowTheWatermark(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 8, hostPages: 64, diskPgs: 128, deviceHigh: 1, deviceLow: 0.5})
	h.commit("t", 0, 4)
	h.commit("t", 1000, 4)
	h.mv.Step(ctx) // written through to host; the device is full but not over its watermark
	if free := h.pools.Device.Stats().Free; free != 0 {
		t.Fatalf("setup: %d device slots free, want 0", free)
	}
	h.mv.MakeRoom(ctx, tier.Device, 3)
	if free := h.pools.Device.Stats().Free; free < 3 {
		t.Fatalf("%d device slots free after MakeRoom(3)", free)
	}
	h.check()
}
