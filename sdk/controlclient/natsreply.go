package controlclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A command's answer may come in two parts. A host with JetStream commands
// (nats.jetstream_commands) reads its commands from a stream: the stream
// answers the message's reply subject with an acknowledgement ({"stream",
// "seq"}) when it stored the command, and the host sends its result, once
// applied or refused, to the inbox in the Kvpilot-Reply header. A host
// without takes the command directly and answers the reply subject. So a
// request names one subject as both, and waits past a stream's
// acknowledgement for the host's own answer: the client reports what the
// host did, never "stored" for a command the host applied or refused, and
// only "stored, result unknown" (QueuedError) when the host's answer does
// not come before the caller's deadline.

// replies routes answers to the requests waiting for them: one wildcard
// subscription per client, a subject under it per request.
type replies struct {
	once   sync.Once
	err    error
	prefix string
	sub    *nats.Subscription

	mu   sync.Mutex
	next uint64
	wait map[string]chan *nats.Msg
}

// expect returns a fresh reply subject and the channel its answers arrive
// on; done forgets it.
func (r *replies) expect(conn *nats.Conn) (subject string, answers <-chan *nats.Msg, done func(), err error) {
	r.once.Do(func() {
		r.prefix = conn.NewRespInbox() + "."
		r.wait = map[string]chan *nats.Msg{}
		r.sub, r.err = conn.Subscribe(r.prefix+"*", r.route)
	})
	if r.err != nil {
		return "", nil, nil, fmt.Errorf("subscribe for answers: %w", r.err)
	}
	r.mu.Lock()
	r.next++
	subject = r.prefix + strconv.FormatUint(r.next, 10)
	// Room for a stream's acknowledgement, the host's answer, and a few
	// more hosts' on a broadcast subject; later ones are dropped.
	ch := make(chan *nats.Msg, 8)
	r.wait[subject] = ch
	r.mu.Unlock()
	return subject, ch, func() {
		r.mu.Lock()
		delete(r.wait, subject)
		r.mu.Unlock()
	}, nil
}

func (r *replies) route(m *nats.Msg) {
	r.mu.Lock()
	ch := r.wait[m.Subject]
	r.mu.Unlock()
	if ch == nil {
		return // answered already, or given up on
	}
	select {
	case ch <- m:
	default:
	}
}

// close ends the subscription; a request after it fails.
func (r *replies) close() {
	r.once.Do(func() { r.err = errors.New("client closed") })
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

// await returns the host's answer to the request whose answers arrive on
// answers (see the comment at the top of this file).
func (c *NATSClient) await(ctx context.Context, answers <-chan *nats.Msg, id string) ([]byte, error) {
	var stored *QueuedError
	for {
		select {
		case <-ctx.Done():
			if stored != nil {
				return nil, stored
			}
			return nil, fmt.Errorf("wait for the host's answer on %s: %w", c.o.Subject, ctx.Err())
		case m := <-answers:
			if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
				// Nobody took the message: neither a host nor a stream.
				return nil, errcode.Wrap(errcode.Unavailable, nats.ErrNoResponders, "no kvpilot host listens on %s", c.o.Subject)
			}
			ack := streamAnswer(m.Data)
			switch {
			case ack == nil:
				return m.Data, nil
			case ack.Error != nil:
				return nil, errcode.New(errcode.Unavailable, "the command stream on %s did not store the command (nothing was applied): %s",
					c.o.Subject, ack.Error.Description)
			case ack.Duplicate:
				return nil, fmt.Errorf("%w (id %s, stream %s seq %d)", ErrDuplicate, id, ack.Stream, ack.Seq)
			}
			stored = &QueuedError{Subject: c.o.Subject, Stream: ack.Stream, Seq: ack.Seq}
		}
	}
}

// pubAck is a JetStream stream's answer to a publish.
type pubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Error     *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// streamAnswer recognises a stream's answer ({"stream","seq"} or
// {"error"}, no "status"); nil for anything else, which is the host's.
func streamAnswer(data []byte) *pubAck {
	if bytes.Contains(data, []byte(`"status"`)) {
		return nil // every answer of the host's has one; skip a second decode
	}
	var ack pubAck
	if json.Unmarshal(data, &ack) != nil || (ack.Stream == "" && ack.Error == nil) {
		return nil
	}
	return &ack
}
