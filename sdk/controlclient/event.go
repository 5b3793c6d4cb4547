package controlclient

import (
	"strconv"

	"github.com/kvpilot/kvpilot/sdk/kvevent"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Event is one KV event in Dynamo's RouterEvent shape (see sdk/kvevent).
type Event = kvevent.Event

// The parts of an Event.
type (
	EventBody   = kvevent.EventBody
	EventData   = kvevent.EventData
	StoredData  = kvevent.StoredData
	StoredBlock = kvevent.StoredBlock
	RemovedData = kvevent.RemovedData
)

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
