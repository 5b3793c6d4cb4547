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
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{"kv-control-3", "kv-control-broadcast"}})
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

// A command applied and then delivered again after a restart (its ack
// lost) is acknowledged and not applied again: the state file says it was
// taken. The redelivery is the same stream message, fetched through a
// second consumer and handed to the restarted host as its own consumer
// would hand it.
func TestRedeliveryAfterARestartIsNotApplied(t *testing.T) {
	h := newHost(t)
	h.state = filepath.Join(h.dir, "commands.state")
	h.startNATS()
	h.startCommands(true)
	seq := h.commit([]uint32{1, 2, 3, 4})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.pinThroughStream(ctx, "first", seq)
	h.stopCommands()

	stream, err := h.js().Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	again, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := again.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil {
		t.Fatalf("no message to deliver again: %v", batch.Error())
	}
	h.startCommands(true)
	h.cmds.onJetStream(msg)
	if got := h.pins(seq); got != 1 {
		t.Fatalf("pin count %d after one command delivered twice", got)
	}
}
