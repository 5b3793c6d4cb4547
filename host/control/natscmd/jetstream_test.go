package natscmd

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// host is a cache index and executor with NATS stores under dir, so a
// test can stop and restart the NATS server on the same data.
type host struct {
	t    *testing.T
	g    *guarded.Index // ix with the lock the executor takes
	ix   *cache.Index
	ex   *executor.Executor
	dir  string
	nats *natsembed.NATS
	cmds *Server
	// state is the command plane's state file ("": memory only).
	state string
}

func newHost(t *testing.T) *host {
	h := &host{t: t, dir: t.TempDir()}
	var err error
	h.ix, err = cache.New(cache.Config{PageSize: 4, Clock: cache.NewMonotonicClock(),
		Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: 64, High: 0.9, Low: 0.8, PinFraction: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	h.g = guarded.New(h.ix)
	if h.ex, err = executor.New(executor.Config{Index: h.g, WorkerID: "3"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.stop)
	return h
}

func (h *host) startNATS() {
	h.t.Helper()
	var err error
	if h.nats, err = natsembed.Start(natsembed.Options{DataDir: filepath.Join(h.dir, "nats")}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) startCommands(jet bool) {
	h.t.Helper()
	var err error
	h.cmds, err = New(Config{Conn: h.nats.Conn(), Ingress: ingressOf(h.t, h.ex, nil, 0), WorkerID: 3, WorkerSubject: "kv-control-3",
		BroadcastSubject: "kv-control-broadcast", JetStream: jet, StateFile: h.state})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.cmds.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *host) stopCommands() {
	if h.cmds != nil {
		if err := h.cmds.Close(); err != nil {
			h.t.Errorf("close commands: %v", err)
		}
		h.cmds = nil
	}
}

func (h *host) stop() {
	h.stopCommands()
	if h.nats != nil {
		h.nats.Close()
		h.nats = nil
	}
}

func (h *host) pins(seq uint64) (n int) {
	h.g.Do(func(ix *cache.Index) {
		p, _ := ix.Lookup("", seq)
		n = p.PinCount
	})
	return n
}

func (h *host) commit(tokens []uint32) []uint64 {
	var m cache.MatchResult
	h.g.Do(func(ix *cache.Index) {
		ix.Match("", blockid.Salt{}, tokens, &m)
		locs := make([]uint64, len(m.Hashes.Local))
		var res cache.CommitResult
		if err := ix.Commit("", m.Hashes, locs, &res); err != nil {
			h.t.Fatal(err)
		}
	})
	return append([]uint64(nil), m.Hashes.Sequence...)
}

func (h *host) client() *controlclient.NATSClient {
	h.t.Helper()
	conn, err := h.nats.Connect("client")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(conn.Close)
	c, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: "kv-control-3", JetStream: true})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func pinTurn(id string, seq uint64) directive.Turn {
	return directive.Turn{ID: id, Directives: []directive.Directive{directive.Cache{BlockHashes: []directive.Hash{directive.Hash(seq)}, Pin: true}}}
}

// Commands replayed with the same Nats-Msg-Id are applied once; distinct
// ones each apply.
func TestJetStreamAppliesReplaysOnce(t *testing.T) {
	h := newHost(t)
	h.startNATS()
	h.startCommands(true)
	seq := h.commit([]uint32{1, 2, 3, 4})[0]
	c := h.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Apply(ctx, pinTurn("turn-1", seq))
	if err != nil || !r.OK() || r.TurnID != "turn-1" {
		t.Fatalf("first: %+v %v", r, err)
	}
	for i := 0; i < 3; i++ {
		if _, err := c.Apply(ctx, pinTurn("turn-1", seq)); !errors.Is(err, controlclient.ErrDuplicate) {
			t.Fatalf("replay %d: %v, want ErrDuplicate", i, err)
		}
	}
	if r, err := c.Apply(ctx, pinTurn("turn-2", seq)); err != nil || !r.OK() {
		t.Fatalf("second turn: %+v %v", r, err)
	}
	if got := h.pins(seq); got != 2 {
		t.Fatalf("pin count %d after turn-1 x4 and turn-2, want 2", got)
	}
}

// Commands published while the host is away survive a NATS server restart
// and are applied once, in order, when the host's consumer is back.
func TestJetStreamCommandsSurviveRestart(t *testing.T) {
	h := newHost(t)
	h.startNATS()
	h.startCommands(true) // creates the stream and the durable consumer
	seqs := h.commit([]uint32{1, 2, 3, 4, 5, 6, 7, 8})
	h.stopCommands()

	conn, err := h.nats.Connect("publisher")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	publish := func(id, payload string) {
		m := nats.NewMsg("kv-control-3")
		m.Data = []byte(payload)
		m.Header.Set(controlclient.HeaderMsgID, id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	pin := `{"type":"Cache","block_hashes":[` + itoa(seqs[1]) + `],"pin":true}`
	publish("a", pin)
	publish("a", pin) // deduplicated by the stream
	publish("b", pin)
	publish("c", `{"type":"Cache","block_hashes":[`+itoa(seqs[1])+`],"pin":false}`)
	publish("d", pin)
	conn.Close()

	h.nats.Close() // server restart: the stream and consumer are on disk
	h.nats = nil
	if h.pins(seqs[1]) != 0 {
		t.Fatal("applied while the host was away")
	}
	h.startNATS()
	h.startCommands(true)
	// a, b, c, d in order: +1 +1 -1 +1 = 2 (a replayed twice would be 3).
	deadline := time.Now().Add(10 * time.Second)
	for h.pins(seqs[1]) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("pin count %d, want 2", h.pins(seqs[1]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Restarting the host's consumer again replays nothing.
	h.stopCommands()
	h.startCommands(true)
	time.Sleep(200 * time.Millisecond)
	if got := h.pins(seqs[1]); got != 2 {
		t.Fatalf("pin count %d after a consumer restart, want 2", got)
	}
}

func itoa(u uint64) string { return directive.Hash(u).String() }
