// Package events turns the cache index's KV events into Dynamo RouterEvent
// JSON and delivers them, in the order the index applied them, to NATS and to
// in-process watchers (the Control service's WatchEvents stream).
//
// The wire shape (DESIGN.md §8) is
//
//	{"worker_id": W, "storage_tier": "device"|"host_pinned"|"disk"|"external",
//	 "event": {"event_id": N, "dp_rank": R,
//	           "data": {"stored": {"parent_hash": P|null, "blocks": [{"block_hash": S, "tokens_hash": L}]}}
//	                 | {"removed": {"block_hashes": [S, ...]}}
//	                 | "cleared"}}
//
// Consecutive events of one kind on one tier are folded into one RouterEvent
// when Dynamo's format can carry them: removals always, stores when each
// block's parent is the block before it (a stored event has one parent_hash).
package events

import (
	"encoding/json"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// RouterEvent is one Dynamo router event.
type RouterEvent struct {
	WorkerID    uint64     `json:"worker_id"`
	StorageTier string     `json:"storage_tier"`
	Event       KvCacheEvt `json:"event"`
	// Tenant is not part of Dynamo's format; it scopes in-process watchers
	// and is never serialized.
	Tenant string `json:"-"`
}

// KvCacheEvt is the inner event.
type KvCacheEvt struct {
	EventID uint64 `json:"event_id"`
	Data    Data   `json:"data"`
	DPRank  uint32 `json:"dp_rank"`
}

// Data is exactly one of Stored, Removed or Cleared.
type Data struct {
	Stored  *StoredData
	Removed *RemovedData
	Cleared bool
}

// StoredData lists blocks that landed, children of ParentHash.
type StoredData struct {
	ParentHash *uint64       `json:"parent_hash"`
	Blocks     []StoredBlock `json:"blocks"`
}

// StoredBlock is one stored block's sequence and local hash.
type StoredBlock struct {
	BlockHash  uint64 `json:"block_hash"`
	TokensHash uint64 `json:"tokens_hash"`
}

// RemovedData lists blocks that left the tier.
type RemovedData struct {
	BlockHashes []uint64 `json:"block_hashes"`
}

// MarshalJSON writes Dynamo's externally tagged form.
func (d Data) MarshalJSON() ([]byte, error) {
	switch {
	case d.Stored != nil:
		return json.Marshal(struct {
			Stored *StoredData `json:"stored"`
		}{d.Stored})
	case d.Removed != nil:
		return json.Marshal(struct {
			Removed *RemovedData `json:"removed"`
		}{d.Removed})
	default:
		return []byte(`"cleared"`), nil
	}
}

// UnmarshalJSON reads Dynamo's externally tagged form (used by tests and by
// tools that watch events).
func (d *Data) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != "cleared" {
			return &json.UnsupportedValueError{Str: s}
		}
		*d = Data{Cleared: true}
		return nil
	}
	var v struct {
		Stored  *StoredData  `json:"stored"`
		Removed *RemovedData `json:"removed"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*d = Data{Stored: v.Stored, Removed: v.Removed}
	return nil
}

// Encoder numbers events and folds runs of index events into RouterEvents.
// It is not safe for concurrent use; the publisher owns one.
type Encoder struct {
	WorkerID uint64
	DPRank   uint32
	nextID   uint64
}

// Encode appends the RouterEvents for evs, in order, to dst.
func (e *Encoder) Encode(dst []RouterEvent, evs []cache.Event) []RouterEvent {
	for i := 0; i < len(evs); {
		ev := evs[i]
		j := i + 1
		switch ev.Kind {
		case cache.Stored:
			d := &StoredData{Blocks: []StoredBlock{{ev.Seq, ev.Local}}}
			if ev.HasParent {
				p := ev.Parent
				d.ParentHash = &p
			}
			for ; j < len(evs) && sameRun(ev, evs[j]) && evs[j].HasParent && evs[j].Parent == evs[j-1].Seq; j++ {
				d.Blocks = append(d.Blocks, StoredBlock{evs[j].Seq, evs[j].Local})
			}
			dst = append(dst, e.next(ev, Data{Stored: d}))
		case cache.Removed:
			d := &RemovedData{BlockHashes: []uint64{ev.Seq}}
			for ; j < len(evs) && sameRun(ev, evs[j]); j++ {
				d.BlockHashes = append(d.BlockHashes, evs[j].Seq)
			}
			dst = append(dst, e.next(ev, Data{Removed: d}))
		case cache.Cleared:
			dst = append(dst, e.next(ev, Data{Cleared: true}))
		}
		i = j
	}
	return dst
}

func sameRun(a, b cache.Event) bool {
	return a.Kind == b.Kind && a.Tier == b.Tier && a.Tenant == b.Tenant
}

func (e *Encoder) next(ev cache.Event, d Data) RouterEvent {
	id := e.nextID
	e.nextID++
	return RouterEvent{
		WorkerID:    e.WorkerID,
		StorageTier: tierName(ev.Tier),
		Event:       KvCacheEvt{EventID: id, Data: d, DPRank: e.DPRank},
		Tenant:      ev.Tenant,
	}
}

func tierName(t tier.Tier) string { return t.EventName() }

// Subject is the NATS subject KV events are published on.
func Subject(namespace, component string) string {
	return "namespace." + namespace + ".component." + component + ".kv-events"
}
