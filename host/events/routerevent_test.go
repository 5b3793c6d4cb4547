package events

import (
	"encoding/json"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

func TestEncodeFoldsRunsAndKeepsOrder(t *testing.T) {
	evs := []cache.Event{
		{Kind: cache.Stored, Tier: tier.Device, Seq: 1, Local: 11},
		{Kind: cache.Stored, Tier: tier.Device, Seq: 2, Local: 12, Parent: 1, HasParent: true},
		{Kind: cache.Stored, Tier: tier.Device, Seq: 9, Local: 19, Parent: 5, HasParent: true}, // not a chain: new event
		{Kind: cache.Stored, Tier: tier.Host, Seq: 1, Local: 11},                               // other tier
		{Kind: cache.Removed, Tier: tier.Device, Seq: 2, Local: 12, Parent: 1, HasParent: true},
		{Kind: cache.Removed, Tier: tier.Device, Seq: 1, Local: 11},
		{Kind: cache.Cleared, Tier: tier.Device},
	}
	enc := Encoder{WorkerID: 42, DPRank: 1}
	got := enc.Encode(nil, evs)
	want := []string{
		`{"worker_id":42,"storage_tier":"device","event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":11},{"block_hash":2,"tokens_hash":12}]}},"dp_rank":1}}`,
		`{"worker_id":42,"storage_tier":"device","event":{"event_id":1,"data":{"stored":{"parent_hash":5,"blocks":[{"block_hash":9,"tokens_hash":19}]}},"dp_rank":1}}`,
		`{"worker_id":42,"storage_tier":"host_pinned","event":{"event_id":2,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":11}]}},"dp_rank":1}}`,
		`{"worker_id":42,"storage_tier":"device","event":{"event_id":3,"data":{"removed":{"block_hashes":[2,1]}},"dp_rank":1}}`,
		`{"worker_id":42,"storage_tier":"device","event":{"event_id":4,"data":"cleared","dp_rank":1}}`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		b, err := json.Marshal(got[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want[i] {
			t.Errorf("event %d:\n got %s\nwant %s", i, b, want[i])
		}
		var back RouterEvent
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("event %d does not read back: %v", i, err)
		}
		if b2, _ := json.Marshal(back); string(b2) != string(b) {
			t.Errorf("event %d round trip:\n got %s\nwant %s", i, b2, b)
		}
	}
	// Numbering continues across calls.
	if more := enc.Encode(nil, evs[:1]); more[0].Event.EventID != 5 {
		t.Fatalf("event ids restarted: %d", more[0].Event.EventID)
	}
}

func TestStorageTierNames(t *testing.T) {
	want := map[tier.Tier]string{tier.Device: "device", tier.Host: "host_pinned", tier.Disk: "disk", tier.Remote: "external"}
	for tr, name := range want {
		if got := tierName(tr); got != name {
			t.Errorf("%v: %q, want %q", tr, got, name)
		}
	}
	if s := Subject("dynamo", "backend"); s != "namespace.dynamo.component.backend.kv-events" {
		t.Fatal(s)
	}
}
