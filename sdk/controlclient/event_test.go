package controlclient

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// The host's event JSON (Dynamo RouterEvent) reads back and writes out
// unchanged, and a WatchEvents message converts to the same value.
func TestEventJSON(t *testing.T) {
	for _, s := range []string{
		`{"worker_id":42,"storage_tier":"device","event":{"event_id":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":2}]}},"dp_rank":1}}`,
		`{"worker_id":42,"storage_tier":"host_pinned","event":{"event_id":1,"data":{"stored":{"parent_hash":7,"blocks":[{"block_hash":8,"tokens_hash":9}]}},"dp_rank":0}}`,
		`{"worker_id":0,"storage_tier":"disk","event":{"event_id":2,"data":{"removed":{"block_hashes":[1,2]}},"dp_rank":0}}`,
		`{"worker_id":0,"storage_tier":"external","event":{"event_id":3,"data":"cleared","dp_rank":0}}`,
	} {
		var ev Event
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		back, _ := json.Marshal(ev)
		if string(back) != s {
			t.Fatalf("round trip:\n%s\n%s", s, back)
		}
	}
	for _, bad := range []string{`"wiped"`, `{}`, `{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}`, `7`} {
		var d EventData
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	parent := uint64(7)
	m := &pb.KVEvent{EventId: 1, WorkerId: "42", StorageTier: pb.Tier_TIER_HOST,
		Data: &pb.KVEvent_Stored_{Stored: &pb.KVEvent_Stored{ParentHash: &parent, Blocks: []*pb.StoredBlock{{BlockHash: 8, TokensHash: 9}}}}}
	got, _ := json.Marshal(eventFromProto(m))
	if want := `{"worker_id":42,"storage_tier":"host_pinned","event":{"event_id":1,"data":{"stored":{"parent_hash":7,"blocks":[{"block_hash":8,"tokens_hash":9}]}},"dp_rank":0}}`; string(got) != want {
		t.Fatalf("from proto:\n%s\n%s", got, want)
	}
}

func TestDialUnixNamesAMissingSocket(t *testing.T) {
	_, err := DialUnix(filepath.Join(t.TempDir(), "nope.sock"), UnixOptions{})
	if err == nil || !strings.Contains(err.Error(), "kvpilot serve") {
		t.Fatalf("got %v", err)
	}
	if _, err := NewNATS(nil, NATSOptions{}); err == nil {
		t.Fatal("NATS client without a subject accepted")
	}
}
