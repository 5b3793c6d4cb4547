// Package events turns the cache index's KV events into Dynamo RouterEvent
// JSON and delivers them, in the order the index applied them, to NATS and to
// in-process watchers (the Control service's WatchEvents stream).
//
// The wire shape is
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
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/kvevent"
)

// RouterEvent is one Dynamo router event; the wire types live in
// sdk/kvevent so clients decode exactly what the host encodes.
type RouterEvent = kvevent.Event

// The parts of a RouterEvent.
type (
	KvCacheEvt  = kvevent.EventBody
	Data        = kvevent.EventData
	StoredData  = kvevent.StoredData
	StoredBlock = kvevent.StoredBlock
	RemovedData = kvevent.RemovedData
)

// Encoder numbers events and folds runs of index events into RouterEvents.
// It is not safe for concurrent use; the publisher owns one. Event ids
// count from 0 unless StartAt says otherwise (Dynamo's own publisher counts
// from 1).
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
			d := &StoredData{Blocks: []StoredBlock{{BlockHash: ev.Seq, TokensHash: ev.Local}}}
			if ev.HasParent {
				p := ev.Parent
				d.ParentHash = &p
			}
			for ; j < len(evs) && sameRun(ev, evs[j]) && evs[j].HasParent && evs[j].Parent == evs[j-1].Seq; j++ {
				d.Blocks = append(d.Blocks, StoredBlock{BlockHash: evs[j].Seq, TokensHash: evs[j].Local})
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

// StartAt makes id the next event id.
func (e *Encoder) StartAt(id uint64) { e.nextID = id }

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

// Subject is the NATS subject of the plain JSON events (events.format:
// json); DynamoSubject is the one Dynamo's router reads.
func Subject(namespace, component string) string {
	return "namespace." + namespace + ".component." + component + ".kv-events"
}

// DynamoSubject is the NATS subject Dynamo's KV router (ai-dynamo 1.6.1,
// event plane on NATS) subscribes to for one endpoint's KV events:
// namespace.<ns>.component.<component>.endpoint.<endpoint>.kv-events.
func DynamoSubject(namespace, component, endpoint string) string {
	return kvevent.DynamoSubject(namespace, component, endpoint)
}
