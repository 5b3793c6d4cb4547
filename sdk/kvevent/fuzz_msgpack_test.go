package kvevent

import (
	"bytes"
	"testing"
)

// FuzzDecodeMessage decodes what anyone publishing on an events subject can
// send (Dynamo's envelope or JSON). For any bytes: no panic, and accepted
// events re-encode to a MessagePack message that decodes to the same
// encoding again.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(AppendEnvelope(nil, &Envelope{PublisherID: 1, Topic: Topic, Payload: AppendBatch(nil, capturedEvents())}))
	f.Add(AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: AppendBatch(nil, []Event{{Event: EventBody{Data: EventData{Cleared: true}}}})}))
	f.Add([]byte(`{"worker_id":1,"storage_tier":"device","event":{"event_id":1,"data":"cleared","dp_rank":0}}`))
	f.Add([]byte{0x85, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0xc4, 0x01, 0x90})
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := DecodeMessage(b)
		if err != nil {
			return
		}
		first := AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: AppendBatch(nil, evs)})
		again, err := DecodeMessage(first)
		if err != nil {
			t.Fatalf("canonical message %x does not decode: %v", first, err)
		}
		second := AppendEnvelope(nil, &Envelope{Topic: Topic, Payload: AppendBatch(nil, again)})
		if !bytes.Equal(first, second) {
			t.Fatalf("unstable encoding:\n%x\n%x", first, second)
		}
	})
}
