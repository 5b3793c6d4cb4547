// Package kvevent holds the KV event wire formats kvpilot publishes:
// Dynamo's RouterEvent as MessagePack in Dynamo's
// event-plane envelope (msgpack.go, envelope.go; events.format: dynamo) and
// as plain JSON (events.format: json). The host encodes them and clients
// decode them with these same types, so the two can never drift apart.
package kvevent

import (
	"encoding/json"
	"fmt"
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
	// Tenant is not part of Dynamo's format and never serialized: the host
	// sets it in-process so watchers can be scoped to a tenant.
	Tenant string `json:"-"`
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

// unmarshalJSON decodes one JSON Event.
func (ev *Event) unmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, ev); err != nil {
		return fmt.Errorf("KV event JSON: %w", err)
	}
	return nil
}
