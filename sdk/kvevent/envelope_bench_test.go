package kvevent

import "testing"

// One envelope of 64 stored events of 4 blocks each, encoded into a reused
// buffer as the publisher does, then decoded as a router would.
func benchBatch() []Event {
	evs := make([]Event, 64)
	for i := range evs {
		p := uint64(i)
		blocks := make([]StoredBlock, 4)
		for j := range blocks {
			blocks[j] = StoredBlock{BlockHash: uint64(i*4+j) * 0x9e3779b97f4a7c15, TokensHash: uint64(j) * 0xc2b2ae3d27d4eb4f}
		}
		evs[i] = Event{WorkerID: 1 << 60, StorageTier: "device", Event: EventBody{EventID: uint64(i + 1),
			Data: EventData{Stored: &StoredData{ParentHash: &p, Blocks: blocks}}}}
	}
	return evs
}

func BenchmarkAppendEnvelope(b *testing.B) {
	b.ReportAllocs()
	evs := benchBatch()
	var payload, buf []byte
	for b.Loop() {
		payload = AppendBatch(payload[:0], evs)
		buf = AppendEnvelope(buf[:0], &Envelope{PublisherID: 7, Sequence: 1, PublishedAt: 2, Topic: Topic, Payload: payload})
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeMessage(b *testing.B) {
	b.ReportAllocs()
	msg := AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: AppendBatch(nil, benchBatch())})
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := DecodeMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}
