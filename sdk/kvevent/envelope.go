package kvevent

import (
	"errors"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Dynamo's event plane (ai-dynamo 1.6.1, NATS transport) wraps every
// message in an envelope, a MessagePack map written in this order:
//
//	{publisher_id: u64, sequence: u64, published_at: u64 (ms since the
//	 Unix epoch), topic: "kv-events", payload: bin}
//
// For KV events the payload is itself MessagePack: an array of Events
// (msgpack.go), one batch. publisher_id is random per publisher and
// sequence counts its messages from 0; event_id inside the events counts
// from 1. The subject is DynamoSubject's. These facts were read from a
// real Dynamo KvEventPublisher's messages, captured on NATS.

// Topic is the event-plane topic of KV events.
const Topic = "kv-events"

// Envelope is one event-plane message.
type Envelope struct {
	PublisherID uint64
	Sequence    uint64
	PublishedAt uint64 // milliseconds since the Unix epoch
	Topic       string
	Payload     []byte
}

// DynamoSubject is the NATS subject Dynamo's KV router subscribes to for
// the events of one endpoint's workers.
func DynamoSubject(namespace, component, endpoint string) string {
	return "namespace." + namespace + ".component." + component + ".endpoint." + endpoint + "." + Topic
}

// AppendEnvelope appends env's MessagePack form to b.
func AppendEnvelope(b []byte, env *Envelope) []byte {
	b = msgp.AppendMapHeader(b, 5)
	b = msgp.AppendString(b, "publisher_id")
	b = msgp.AppendUint64(b, env.PublisherID)
	b = msgp.AppendString(b, "sequence")
	b = msgp.AppendUint64(b, env.Sequence)
	b = msgp.AppendString(b, "published_at")
	b = msgp.AppendUint64(b, env.PublishedAt)
	b = msgp.AppendString(b, "topic")
	b = msgp.AppendString(b, env.Topic)
	b = msgp.AppendString(b, "payload")
	return msgp.AppendBytes(b, env.Payload)
}

// AppendBatch appends evs as one payload: a MessagePack array of Events.
func AppendBatch(b []byte, evs []Event) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(evs)))
	for i := range evs {
		b = AppendMsgpack(b, &evs[i])
	}
	return b
}

// DecodeEnvelope reads an event-plane message. Unknown keys are skipped;
// the payload must be present.
func DecodeEnvelope(b []byte) (Envelope, error) {
	var env Envelope
	n, b, err := readMap(b)
	if err != nil {
		return env, fmt.Errorf("%w: envelope: %w", ErrMsgpack, err)
	}
	havePayload := false
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return env, fmt.Errorf("%w: envelope key: %w", ErrMsgpack, err)
		}
		switch string(key) {
		case "publisher_id":
			env.PublisherID, b, err = msgp.ReadUint64Bytes(b)
		case "sequence":
			env.Sequence, b, err = msgp.ReadUint64Bytes(b)
		case "published_at":
			env.PublishedAt, b, err = msgp.ReadUint64Bytes(b)
		case "topic":
			env.Topic, b, err = msgp.ReadStringBytes(b)
		case "payload":
			// Dynamo writes bin; accept an array of small ints too,
			// which is how some encoders write a byte vector.
			env.Payload, b, err = readPayload(b)
			havePayload = err == nil
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return env, fmt.Errorf("%w: envelope %s: %w", ErrMsgpack, key, err)
		}
	}
	if !havePayload {
		return env, fmt.Errorf("%w: envelope has no payload", ErrMsgpack)
	}
	return env, nil
}

func readPayload(b []byte) ([]byte, []byte, error) {
	if msgp.NextType(b) != msgp.ArrayType {
		v, rest, err := msgp.ReadBytesBytes(b, nil)
		return v, rest, err
	}
	n, b, err := readArray(b)
	if err != nil {
		return nil, nil, err
	}
	out := make([]byte, 0, n)
	for range n {
		var v uint64
		if v, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if v > 255 {
			return nil, nil, fmt.Errorf("payload byte %d", v)
		}
		out = append(out, byte(v))
	}
	return out, b, nil
}

// DecodeBatch reads a payload: an array of Events, with nothing after it.
func DecodeBatch(b []byte) ([]Event, error) {
	n, b, err := readArray(b)
	if err != nil {
		return nil, fmt.Errorf("%w: batch: %w", ErrMsgpack, err)
	}
	evs := make([]Event, 0, n)
	for range n {
		var ev Event
		if ev, b, err = DecodeMsgpack(b); err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the batch", ErrMsgpack, len(b))
	}
	return evs, nil
}

// ErrTopic says an envelope carried another topic than KV events.
var ErrTopic = errors.New("not a KV event message")

// DecodeMessage reads one message from an events subject in either form
// kvpilot publishes: Dynamo's envelope (a MessagePack map) with a batch of
// events, or one plain JSON Event (events.format: json).
func DecodeMessage(data []byte) ([]Event, error) {
	if len(data) > 0 && data[0] == '{' {
		var ev Event
		if err := ev.unmarshalJSON(data); err != nil {
			return nil, err
		}
		return []Event{ev}, nil
	}
	env, err := DecodeEnvelope(data)
	if err != nil {
		return nil, err
	}
	if env.Topic != Topic {
		return nil, fmt.Errorf("%w: topic %q", ErrTopic, env.Topic)
	}
	return DecodeBatch(env.Payload)
}
