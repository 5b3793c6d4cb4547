package publish

import (
	"errors"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/tier"
)

func stored(n int) []cache.Event {
	evs := make([]cache.Event, n)
	for i := range evs {
		evs[i] = cache.Event{Kind: cache.Stored, Tier: tier.Device, Tenant: []string{"", "acme"}[i%2], Seq: uint64(i + 1), Local: uint64(i + 1)}
	}
	return evs
}

func TestHubFansOutInOrderAndEndsSlowWatchers(t *testing.T) {
	p, err := New(Config{WorkerID: 7})
	if err != nil {
		t.Fatal(err)
	}
	hub := p.Hub()
	all := hub.Subscribe(100, nil)
	acme := hub.Subscribe(100, func(ev *events.RouterEvent) bool { return ev.Tenant == "acme" })
	slow := hub.Subscribe(3, nil)
	p.Consume(stored(10))
	if hub.Watchers() != 2 {
		t.Fatalf("%d watchers, want the slow one dropped", hub.Watchers())
	}
	for i := 0; i < 10; i++ {
		ev := <-all.Events()
		if ev.Event.EventID != uint64(i) || ev.WorkerID != 7 {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	for i := 0; i < 5; i++ {
		if ev := <-acme.Events(); ev.Tenant != "acme" || ev.Event.EventID != uint64(2*i+1) {
			t.Fatalf("acme event %d: %+v", i, ev)
		}
	}
	n := 0
	for range slow.Events() {
		n++
	}
	if n != 3 || !errors.Is(slow.Err(), ErrOverflow) {
		t.Fatalf("slow watcher got %d events, err %v", n, slow.Err())
	}
	all.Close()
	all.Close() // idempotent
	if _, open := <-all.Events(); open {
		t.Fatal("closed watch still open")
	}
	if all.Err() != nil {
		t.Fatalf("closed (not overflowed) watch has error %v", all.Err())
	}
	slow.Close() // after overflow: no double close
}

func BenchmarkConsume(b *testing.B) {
	p, _ := New(Config{})
	w := p.Hub().Subscribe(1<<20, nil)
	defer w.Close()
	evs := stored(64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Consume(evs)
		for range 64 {
			<-w.Events()
		}
	}
}
