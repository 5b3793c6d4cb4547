package publish

import (
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/natsembed"
)

// counter reads a counter from the registry the host serves on /metrics,
// as a scrape would; a counter missing from it fails the test.
func counter(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not in the registry", name)
	return 0
}

// Events published to a real NATS server are counted in
// kvpilot_events_published_total, one per event a subscriber receives; a
// watcher that falls behind is counted in
// kvpilot_event_watchers_overflowed_total; nothing failed, so
// kvpilot_events_failed_total stays 0.
func TestPublishMetrics(t *testing.T) {
	n, err := natsembed.Start(natsembed.Options{DataDir: filepath.Join(t.TempDir(), "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	subject := events.Subject("dynamo", "backend")
	var got atomic.Int64
	sub, err := n.Conn().Subscribe(subject, func(*nats.Msg) { got.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := metrics.New()
	p, err := New(Config{Conn: n.Conn(), Subject: subject, WorkerID: 1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	slow := p.Hub().Subscribe(2, nil)
	defer slow.Close()
	p.Consume(stored(5))
	p.Consume(stored(7))
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the subscriber to receive 12 events", func() bool { return got.Load() == 12 })
	if v := counter(t, m, "kvpilot_events_published_total"); v != 12 || p.Published() != 12 {
		t.Fatalf("published: metric %v, Published() %d, subscriber got 12", v, p.Published())
	}
	if v := counter(t, m, "kvpilot_events_failed_total"); v != 0 {
		t.Fatalf("failed %v with the server up", v)
	}
	if v := counter(t, m, "kvpilot_event_watchers_overflowed_total"); v != 1 || p.Hub().Overflowed() != 1 {
		t.Fatalf("overflowed watchers: metric %v, Overflowed() %d, want 1", v, p.Hub().Overflowed())
	}
}
