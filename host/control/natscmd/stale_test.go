package natscmd

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pinThroughStream sends a pin through the command stream and waits for
// its result: the consumer takes commands in stream order, so any command
// the stream held before it was taken (and, if applied, counted) by then.
func (h *host) pinThroughStream(ctx context.Context, id string, seq uint64) {
	h.t.Helper()
	r, err := h.client().Apply(ctx, pinTurn(id, seq))
	if err != nil || !r.OK() {
		h.t.Fatalf("pin %s: %+v %v", id, r, err)
	}
}

func (h *host) js() jetstream.JetStream {
	h.t.Helper()
	conn, err := h.nats.Connect("test")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(conn.Close)
	js, err := jetstream.New(conn)
	if err != nil {
		h.t.Fatal(err)
	}
	return js
}

// A host started without JetStream commands on a data dir whose NATS
// store holds the command stream of an earlier run retires it: a plain
// request gets the host's own answer (not the stream's acknowledgement),
// and turning JetStream back on replays nothing the host applied directly.
func TestPlainHostRetiresALeftoverStream(t *testing.T) {
	h := newHost(t)
	h.startNATS()
	h.startCommands(true)
	h.stopCommands()
	seq := h.commit([]uint32{1, 2, 3, 4})[0]

	h.startCommands(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := h.js()
	if _, err := js.Stream(ctx, DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the leftover stream is still there: %v", err)
	}
	conn, err := h.nats.Connect("raw")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := conn.Request("kv-control-3", []byte(`{"type":"Cache","block_hashes":[`+itoa(seq)+`],"pin":true}`), 5*time.Second)
	if err != nil || !strings.Contains(string(resp.Data), `"status":"ok"`) {
		t.Fatalf("plain request: %v %s", err, respData(resp))
	}
	if got := h.pins(seq); got != 1 {
		t.Fatalf("pin count %d after one plain request", got)
	}

	h.stopCommands()
	h.startCommands(true)
	other := h.commit([]uint32{9, 9, 9, 9})[0]
	h.pinThroughStream(ctx, "after", other)
	if got := h.pins(seq); got != 1 {
		t.Fatalf("pin count %d after JetStream commands came back on: the command applied directly was replayed", got)
	}
}

func respData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// Even when a run without JetStream could not retire the stream (here it
// is made again by hand, holding a command that run applied directly), the
// next run with JetStream replays none of what the stream held when it
// started: the state file says the last run took commands directly.
func TestJetStreamAfterAPlainRunReplaysNothingItHeld(t *testing.T) {
	h := newHost(t)
	h.state = filepath.Join(h.dir, "commands.state")
	h.startNATS()
	h.startCommands(true)
	h.stopCommands()
	h.startCommands(false)
	h.stopCommands()
	seq := h.commit([]uint32{1, 2, 3, 4})[0]

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := h.js()
	// The plain run deleted the stream; nats-server removes its store
	// behind the reply, and creating it again at once can meet that
	// removal (err_code 10049, "error creating store for stream").
	var stream jetstream.Stream
	var err error
	for {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{"kv-control-3", "kv-control-broadcast"}})
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "error creating store") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "kvpilot-worker-3",
		FilterSubjects: []string{"kv-control-3", "kv-control-broadcast"}, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("kv-control-3")
	m.Data = []byte(`{"type":"Cache","block_hashes":[` + itoa(seq) + `],"pin":true}`)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	h.startCommands(true)
	h.pinThroughStream(ctx, "new", seq)
	if got := h.pins(seq); got != 1 {
		t.Fatalf("pin count %d: the stream's command from the run without JetStream was replayed", got)
	}
}

// ackLost is a delivery whose acknowledgement does not reach the server:
// a leader change or a broken connection at that moment, which a test
// cannot time. Everything else is the real message.
type ackLost struct{ jetstream.Msg }

func (ackLost) DoubleAck(context.Context) error { return errors.New("ack lost") }

// A command applied with its ack lost, then delivered again after a
// restart, is acknowledged and not applied again: the state file says so.
// The message is a real one of the host's own consumer, fetched while the
// host is stopped and handed over as its consumer hands it, the first time
// with its ack lost.
func TestRedeliveryAfterALostAckIsNotApplied(t *testing.T) {
	for _, kept := range []bool{true, false} {
		name := "state file"
		if !kept {
			name = "memory only"
		}
		t.Run(name, func(t *testing.T) {
			h := newHost(t)
			if kept {
				h.state = filepath.Join(h.dir, "commands.state")
			}
			h.startNATS()
			h.startCommands(true)
			seq := h.commit([]uint32{1, 2, 3, 4})[0]
			h.stopCommands()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			js := h.js()
			m := nats.NewMsg("kv-control-3")
			m.Data = []byte(`{"type":"Cache","block_hashes":[` + itoa(seq) + `],"pin":true}`)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			cons, err := js.Consumer(ctx, DefaultStream, "kvpilot-worker-3")
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			msg := <-batch.Messages()
			if msg == nil {
				t.Fatalf("nothing to deliver: %v", batch.Error())
			}

			h.startCommands(true)
			h.cmds.onJetStream(ackLost{msg})
			if got := h.pins(seq); got != 1 {
				t.Fatalf("pin count %d after the first delivery", got)
			}
			h.stopCommands()
			h.startCommands(true)
			h.cmds.onJetStream(msg)
			want := 1
			if !kept {
				want = 2 // what a host without the state file does
			}
			if got := h.pins(seq); got != want {
				t.Fatalf("pin count %d after the same command delivered twice, want %d", got, want)
			}
		})
	}
}
