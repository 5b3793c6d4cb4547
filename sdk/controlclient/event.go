package controlclient

import (
	"encoding/json"
	"fmt"
	"strconv"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Event is one KV event in Dynamo's RouterEvent shape, the JSON the host
// publishes on namespace.<ns>.component.<component>.kv-events:
//
//	{"worker_id":0,"storage_tier":"device","event":{"event_id":7,"dp_rank":0,
//	 "data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}
type Event struct {
	WorkerID    uint64    `json:"worker_id"`
	StorageTier string    `json:"storage_tier"` // device, host_pinned, disk, external
	Event       EventBody `json:"event"`
}

// EventBody is the inner event.
type EventBody struct {
	EventID uint64    `json:"event_id"`
	Data    EventData `json:"data"`
	DPRank  uint32    `json:"dp_rank"`
}

// EventData is exactly one of Stored, Removed or Cleared.
type EventData struct {
	Stored  *StoredData
	Removed *RemovedData
	Cleared bool
}

// StoredData lists blocks that landed on the tier, children of ParentHash.
type StoredData struct {
	ParentHash *uint64       `json:"parent_hash"`
	Blocks     []StoredBlock `json:"blocks"`
}

// StoredBlock is a block's sequence hash and local (tokens) hash.
type StoredBlock struct {
	BlockHash  uint64 `json:"block_hash"`
	TokensHash uint64 `json:"tokens_hash"`
}

// RemovedData lists blocks that left the tier.
type RemovedData struct {
	BlockHashes []uint64 `json:"block_hashes"`
}

// Kind is "stored", "removed" or "cleared".
func (d EventData) Kind() string {
	switch {
	case d.Stored != nil:
		return "stored"
	case d.Removed != nil:
		return "removed"
	}
	return "cleared"
}

// MarshalJSON writes Dynamo's externally tagged form.
func (d EventData) MarshalJSON() ([]byte, error) {
	switch {
	case d.Stored != nil:
		return json.Marshal(map[string]*StoredData{"stored": d.Stored})
	case d.Removed != nil:
		return json.Marshal(map[string]*RemovedData{"removed": d.Removed})
	}
	return []byte(`"cleared"`), nil
}

// UnmarshalJSON reads Dynamo's externally tagged form.
func (d *EventData) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != "cleared" {
			return fmt.Errorf("event data %q: want \"cleared\" or an object", s)
		}
		*d = EventData{Cleared: true}
		return nil
	}
	var v struct {
		Stored  *StoredData  `json:"stored"`
		Removed *RemovedData `json:"removed"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	if (v.Stored == nil) == (v.Removed == nil) {
		return fmt.Errorf("event data: want exactly one of stored, removed")
	}
	*d = EventData{Stored: v.Stored, Removed: v.Removed}
	return nil
}

var tierEventNames = map[pb.Tier]string{
	pb.Tier_TIER_DEVICE: "device",
	pb.Tier_TIER_HOST:   "host_pinned",
	pb.Tier_TIER_DISK:   "disk",
	pb.Tier_TIER_REMOTE: "external",
}

// eventFromProto converts a WatchEvents message.
func eventFromProto(m *pb.KVEvent) Event {
	w, _ := strconv.ParseUint(m.GetWorkerId(), 10, 64)
	ev := Event{WorkerID: w, StorageTier: tierEventNames[m.GetStorageTier()],
		Event: EventBody{EventID: m.GetEventId(), DPRank: uint32(m.GetDpRank())}}
	switch d := m.GetData().(type) {
	case *pb.KVEvent_Stored_:
		st := &StoredData{ParentHash: d.Stored.ParentHash, Blocks: make([]StoredBlock, len(d.Stored.GetBlocks()))}
		for i, b := range d.Stored.GetBlocks() {
			st.Blocks[i] = StoredBlock{BlockHash: b.GetBlockHash(), TokensHash: b.GetTokensHash()}
		}
		ev.Event.Data.Stored = st
	case *pb.KVEvent_Removed_:
		ev.Event.Data.Removed = &RemovedData{BlockHashes: d.Removed.GetBlockHashes()}
	default:
		ev.Event.Data.Cleared = true
	}
	return ev
}
