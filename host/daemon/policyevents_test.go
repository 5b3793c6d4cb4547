package daemon

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

func TestKVObservation(t *testing.T) {
	enc := events.Encoder{WorkerID: 1}
	evs := enc.Encode(nil, []cache.Event{
		{Kind: cache.Stored, Tier: tier.Host, Tenant: "a", Seq: 5, Local: 6, Parent: 4, HasParent: true},
		{Kind: cache.Removed, Tier: tier.Device, Tenant: "a", Seq: 5},
		{Kind: cache.Cleared, Tier: tier.Disk},
	})
	want := []policy.KVEvent{
		{Type: policy.KVStored, Tier: "host", Parent: 4, HasParent: true, BlockHashes: []uint64{5}},
		{Type: policy.KVRemoved, Tier: "device", BlockHashes: []uint64{5}},
		{Type: policy.KVCleared, Tier: "disk"},
	}
	for i, ev := range evs {
		obs, ok := kvObservation(ev)
		if !ok || obs.Kind != policy.KindKVEvent || obs.Check() != nil {
			t.Fatalf("event %d: %+v %v", i, obs, obs.Check())
		}
		got := *obs.KV
		if got.Type != want[i].Type || got.Tier != want[i].Tier || got.Parent != want[i].Parent ||
			len(got.BlockHashes) != len(want[i].BlockHashes) || (len(got.BlockHashes) > 0 && got.BlockHashes[0] != want[i].BlockHashes[0]) {
			t.Errorf("event %d: got %+v, want %+v", i, got, want[i])
		}
		if i < 2 && obs.Tenant != "a" {
			t.Errorf("event %d lost its tenant", i)
		}
	}
}
