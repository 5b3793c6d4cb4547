package plane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// flatten lists events block by block, as "stored:HASH" / "removed:HASH".
func flatten(evs []controlclient.Event) []string {
	var out []string
	for _, ev := range evs {
		switch d := ev.Event.Data; {
		case d.Stored != nil:
			for _, b := range d.Stored.Blocks {
				out = append(out, fmt.Sprintf("stored:%d", b.BlockHash))
			}
		case d.Removed != nil:
			for _, h := range d.Removed.BlockHashes {
				out = append(out, fmt.Sprintf("removed:%d", h))
			}
		default:
			out = append(out, "cleared")
		}
	}
	return out
}

// collector gathers a watch's events until stopped.
type collector struct {
	mu  sync.Mutex
	evs []controlclient.Event
	err error
}

func (c *collector) add(ev controlclient.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, ev)
	return nil
}

func (c *collector) events() []controlclient.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]controlclient.Event(nil), c.evs...)
}

// watch starts a watch and returns once it is registered.
func watch(t *testing.T, c controlclient.Client, o controlclient.WatchOptions) (*collector, context.CancelFunc) {
	t.Helper()
	col := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	o.Ready = func() { close(ready) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := c.Watch(ctx, o, col.add)
		col.mu.Lock()
		col.err = err
		col.mu.Unlock()
	}()
	select {
	case <-ready:
	case <-done:
		t.Fatalf("watch ended before it started: %v", col.err)
	case <-time.After(5 * time.Second):
		t.Fatal("watch not ready within 5s")
	}
	t.Cleanup(func() { cancel(); <-done })
	return col, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Events reach a NATS subscriber and a WatchEvents stream in the order the
// index applied them, numbered without gaps, identical on both paths.
func TestEventsPublishedInOrder(t *testing.T) {
	e := newEnv(t)
	overNATS, _ := watch(t, e.nc, controlclient.WatchOptions{})
	overSocket, _ := watch(t, e.uds, controlclient.WatchOptions{})
	acmeOnly, _ := watch(t, e.uds, controlclient.WatchOptions{Tenant: "acme"})

	a := e.commit("", toks(0, 12)).Sequence    // stored a0..a2
	b := e.commit("acme", toks(0, 8)).Sequence // stored b0, b1 (another tenant)
	e.commit("", toks(12, 4))                  // another root: stored
	ok(t, apply(t, e.uds, "", directive.Prune{AfterBlockHash: directive.Hash(a[0])}))

	// Consecutive stores fold into one event when they reach the publisher
	// in one batch, which is timing: compare the blocks in order, and the
	// events themselves between NATS and the socket.
	blk := func(kind string, h uint64) string { return fmt.Sprintf("%s:%d", kind, h) }
	want := []string{blk("stored", a[0]), blk("stored", a[1]), blk("stored", a[2]), blk("stored", b[0]), blk("stored", b[1])}
	third := len(want)
	want = append(want, "", blk("removed", a[2]), blk("removed", a[1]))
	waitFor(t, "every block on NATS and the socket", func() bool {
		return len(flatten(overNATS.events())) >= len(want) && len(flatten(overSocket.events())) >= len(want)
	})
	n, s := overNATS.events(), overSocket.events()
	fn := flatten(n)
	want[third] = fn[third] // the third commit's page: a root of its own, hash not needed here
	if fmt.Sprint(fn) != fmt.Sprint(want) || fmt.Sprint(flatten(s)) != fmt.Sprint(want) {
		t.Fatalf("blocks in order:\nNATS   %v\nsocket %v\nwant   %v", fn, flatten(s), want)
	}
	if len(n) != len(s) {
		t.Fatalf("NATS saw %d events, the socket %d", len(n), len(s))
	}
	for i := range n {
		jn, _ := json.Marshal(n[i])
		js, _ := json.Marshal(s[i])
		if string(jn) != string(js) {
			t.Fatalf("event %d differs:\nNATS   %s\nsocket %s", i, jn, js)
		}
		if n[i].Event.EventID != uint64(i) || n[i].WorkerID != 42 || n[i].StorageTier != "device" {
			t.Fatalf("event %d (ids must run from 0 without gaps): %s", i, jn)
		}
	}
	if first := n[0].Event.Data.Stored; first == nil || first.ParentHash != nil || first.Blocks[0].BlockHash != a[0] {
		t.Fatalf("first stored event: %+v", n[0].Event.Data)
	}
	wantAcme := []string{blk("stored", b[0]), blk("stored", b[1])}
	waitFor(t, "acme's blocks", func() bool { return len(flatten(acmeOnly.events())) >= len(wantAcme) })
	time.Sleep(50 * time.Millisecond) // anything else would have arrived by now
	if got := flatten(acmeOnly.events()); fmt.Sprint(got) != fmt.Sprint(wantAcme) {
		t.Fatalf("tenant-filtered watch saw %v, want %v", got, wantAcme)
	}
}

// A watcher that stops reading is ended with RESOURCE_EXHAUSTED once its
// buffer fills; what it got before is in order with no gap, and the host
// went on publishing to NATS and applying directives meanwhile.
func TestSlowWatcherEndsWithResourceExhausted(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WatchBuffer = 8 })
	// A client with fixed 64 KiB flow-control windows, so a stream it does
	// not read stalls the server soon.
	conn, err := grpc.NewClient("unix:"+e.plane.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := pb.NewControlClient(conn).WatchEvents(ctx, &pb.WatchEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	sub, err := e.nc.Conn().SubscribeSync("namespace.dynamo.component.backend.kv-events")
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	e.nc.Conn().Flush()

	const n = 20000
	for i := 0; i < n; i++ { // unrelated roots: one RouterEvent each
		e.q.Push(cache.Event{Kind: cache.Stored, Tier: tier.Device, Seq: uint64(i + 1), Local: uint64(i + 1)})
	}
	waitFor(t, "the slow watcher to be dropped", func() bool { return e.plane.Hub().Watchers() == 0 })
	// The host is not blocked: NATS got every event, and directives apply.
	waitFor(t, "all events on NATS", func() bool { p, _, _ := sub.Pending(); return p >= n })
	h := e.commit("", toks(0, 4)).Sequence
	ok(t, apply(t, e.uds, "", directive.Cache{BlockHashes: hs(h[0]), Pin: true}))

	var got uint64
	for {
		m, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stream ended with %v, want RESOURCE_EXHAUSTED", err)
			}
			break
		}
		if m.GetEventId() != got {
			t.Fatalf("event %d after %d: a gap", m.GetEventId(), got)
		}
		got++
	}
	if got == 0 || got >= n {
		t.Fatalf("slow watcher received %d of %d events before ending", got, n)
	}

	// The client library names the condition.
	e2 := newEnv(t, func(c *Config) { c.WatchBuffer = 1 })
	col := &collector{}
	block := make(chan struct{})
	errc := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		errc <- e2.uds.Watch(ctx, controlclient.WatchOptions{Ready: func() { close(ready) }}, func(ev controlclient.Event) error {
			<-block
			return col.add(ev)
		})
	}()
	<-ready
	for i := 0; i < n; i++ {
		e2.q.Push(cache.Event{Kind: cache.Stored, Tier: tier.Device, Seq: uint64(i + 1), Local: uint64(i + 1)})
	}
	waitFor(t, "the watcher to be dropped", func() bool { return e2.plane.Hub().Watchers() == 0 })
	close(block)
	if err := <-errc; !errors.Is(err, controlclient.ErrFellBehind) {
		t.Fatalf("Watch returned %v, want ErrFellBehind", err)
	}
}
