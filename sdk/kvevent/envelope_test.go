package kvevent

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// dynamoCaptured are two messages a real Dynamo KvEventPublisher
// (ai-dynamo-runtime 1.6.1, event plane on NATS) published for worker 7,
// dp_rank 2, on namespace.ns1.component.comp1.endpoint.gen.kv-events: a
// store of two blocks, then the removal of the second.
func dynamoCaptured(t *testing.T) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/dynamo-1.6.1-envelopes.hex")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Fields(string(raw)) {
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) != 2 {
		t.Fatalf("want 2 captured messages, have %d", len(out))
	}
	return out
}

func capturedEvents() []Event {
	return []Event{
		{WorkerID: 7, StorageTier: "device", Event: EventBody{EventID: 1, DPRank: 2, Data: EventData{Stored: &StoredData{
			Blocks: []StoredBlock{{BlockHash: 111, TokensHash: 14643705804678351452}, {BlockHash: 222, TokensHash: 16777012769546811212}}}}}},
		{WorkerID: 7, StorageTier: "device", Event: EventBody{EventID: 2, DPRank: 2, Data: EventData{Removed: &RemovedData{BlockHashes: []uint64{222}}}}},
	}
}

// TestDynamoCapturedDecodes: kvpilot reads Dynamo's own messages.
func TestDynamoCapturedDecodes(t *testing.T) {
	want := capturedEvents()
	for i, msg := range dynamoCaptured(t) {
		env, err := DecodeEnvelope(msg)
		if err != nil {
			t.Fatal(err)
		}
		if env.Topic != Topic || env.Sequence != uint64(i) || env.PublisherID == 0 || env.PublishedAt < 1_700_000_000_000 {
			t.Fatalf("envelope %d: %+v", i, env)
		}
		evs, err := DecodeMessage(msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || !reflect.DeepEqual(evs[0], want[i]) {
			t.Fatalf("message %d: got %+v want %+v", i, evs, want[i])
		}
	}
}

// TestDynamoCapturedBytes: kvpilot writes, byte for byte, what Dynamo's
// publisher writes for the same events, envelope included.
func TestDynamoCapturedBytes(t *testing.T) {
	want := capturedEvents()
	for i, msg := range dynamoCaptured(t) {
		env, err := DecodeEnvelope(msg)
		if err != nil {
			t.Fatal(err)
		}
		mine := Envelope{PublisherID: env.PublisherID, Sequence: env.Sequence, PublishedAt: env.PublishedAt,
			Topic: Topic, Payload: AppendBatch(nil, want[i:i+1])}
		if got := AppendEnvelope(nil, &mine); !bytes.Equal(got, msg) {
			t.Fatalf("message %d differs from Dynamo's:\nkvpilot %x\ndynamo  %x", i, got, msg)
		}
	}
}

func TestMsgpackRoundTrip(t *testing.T) {
	p := uint64(1 << 63)
	evs := []Event{
		{WorkerID: 1<<64 - 1, StorageTier: "host_pinned", Event: EventBody{EventID: 9, DPRank: 3, Data: EventData{Stored: &StoredData{
			ParentHash: &p, Blocks: []StoredBlock{{BlockHash: 1, TokensHash: 2}}}}}},
		{WorkerID: 5, StorageTier: "disk", Event: EventBody{EventID: 10, Data: EventData{Removed: &RemovedData{BlockHashes: []uint64{}}}}},
		{WorkerID: 5, StorageTier: "external", Event: EventBody{EventID: 11, Data: EventData{Cleared: true}}},
	}
	msg := AppendEnvelope(nil, &Envelope{PublisherID: 3, Sequence: 4, PublishedAt: 5, Topic: Topic, Payload: AppendBatch(nil, evs)})
	got, err := DecodeMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, evs) {
		t.Fatalf("got %+v\nwant %+v", got, evs)
	}
}

func TestDecodeMessageRefuses(t *testing.T) {
	ok := AppendBatch(nil, capturedEvents())
	for name, msg := range map[string][]byte{
		"empty":       nil,
		"json junk":   []byte(`{"worker_id":"x"}`),
		"other topic": AppendEnvelope(nil, &Envelope{Topic: "fpm", Payload: ok}),
		"no payload":  {0x81, 0xa5, 't', 'o', 'p', 'i', 'c', 0xa0},
		"trailing":    AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: append(ok[:len(ok):len(ok)], 0xc0)}),
		"huge array":  AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}}),
		"truncated":   AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: ok[:len(ok)-3]}),
	} {
		if _, err := DecodeMessage(msg); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "other topic" && !errors.Is(err, ErrTopic) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
