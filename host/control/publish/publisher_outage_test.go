package publish

import (
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/natsembed"
)

// While the NATS server is down the publisher's client buffers events (up
// to its reconnect buffer) and sends them, in order, once it reconnects;
// what does not fit is dropped, counted in Failed (and
// kvpilot_events_failed_total) and logged, never reordered: a router sees
// a gap in event_id, which tells it to resync.
func TestEventsDuringOutageBufferedThenDroppedAndCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	start := func() *natsembed.NATS {
		n, err := natsembed.Start(natsembed.Options{DataDir: dir, Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	srv := start()
	defer func() { srv.Close() }()
	url := "nats://" + addr
	const bufBytes = 16 << 10
	conn, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(bufBytes))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sub, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	subject := events.Subject("dynamo", "backend")
	var mu sync.Mutex
	var ids []uint64
	if _, err := sub.Subscribe(subject, func(m *nats.Msg) {
		var ev events.RouterEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			mu.Lock()
			ids = append(ids, ev.Event.EventID)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	p, err := New(Config{Conn: conn, Subject: subject, WorkerID: 1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	p.Consume(stored(4))
	srv.Close()
	waitUntil(t, "the client to notice the outage", func() bool { return conn.IsReconnecting() })
	// A few events fit the reconnect buffer; a flood does not.
	p.Consume(stored(4))
	if p.Failed() != 0 {
		t.Fatalf("%d events dropped that fit the reconnect buffer", p.Failed())
	}
	p.Consume(stored(400))
	if p.Failed() == 0 {
		t.Fatal("a flood past the reconnect buffer was not counted as dropped")
	}
	if p.Published()+p.Failed() != 408 {
		t.Fatalf("published %d + failed %d != 408 events", p.Published(), p.Failed())
	}
	// The drops are visible where operators look: /metrics.
	if f, pub := counter(t, m, "kvpilot_events_failed_total"), counter(t, m, "kvpilot_events_published_total"); f != float64(p.Failed()) || pub != float64(p.Published()) {
		t.Fatalf("metrics failed %v published %v; counted failed %d published %d", f, pub, p.Failed(), p.Published())
	}
	srv = start()
	waitUntil(t, "both clients to reconnect", func() bool { return conn.IsConnected() && sub.IsConnected() })
	// A round trip on the subscriber's connection: the server has its
	// subscription again before the events that must reach it are sent.
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	p.Consume(stored(2))
	last := p.Published() + p.Failed() - 1
	waitUntil(t, "the events after the reconnect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ids) > 0 && ids[len(ids)-1] == last
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("event_id %d after %d", ids[i], ids[i-1])
		}
	}
	t.Logf("%d events, %d dropped during the outage, %d received (ids 0..%d)", last+1, p.Failed(), len(ids), last)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
