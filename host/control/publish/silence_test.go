package publish

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// A connector-mode engine announces its own device blocks, so the host's
// staging tier goes silent; the tiers kvpilot owns are still announced,
// with event ids that leave no gap (a gap tells a router to resync).
func TestSilencedTierIsNotAnnounced(t *testing.T) {
	p, err := New(Config{WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := p.Hub().Subscribe(100, nil)
	batch := func() []cache.Event {
		return []cache.Event{
			{Kind: cache.Stored, Tier: tier.Device, Seq: 1, Local: 1},
			{Kind: cache.Stored, Tier: tier.Host, Seq: 1, Local: 1},
			{Kind: cache.Removed, Tier: tier.Device, Seq: 1},
			{Kind: cache.Stored, Tier: tier.Disk, Seq: 1, Local: 1},
		}
	}
	p.Silence(tier.Device, true)
	p.Consume(batch())
	p.Silence(tier.Device, false)
	p.Consume(batch()[:1])
	want := []string{tier.Host.EventName(), tier.Disk.EventName(), tier.Device.EventName()}
	for i, name := range want {
		ev := <-w.Events()
		if ev.StorageTier != name || ev.Event.EventID != uint64(i) {
			t.Fatalf("event %d: tier %q id %d, want %q id %d", i, ev.StorageTier, ev.Event.EventID, name, i)
		}
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}
