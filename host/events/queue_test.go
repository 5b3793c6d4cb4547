package events

import (
	"context"
	"sync"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
)

func TestQueueKeepsOrderAcrossProducers(t *testing.T) {
	q := NewQueue()
	var got []cache.Event
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		q.Run(ctx, func(b []cache.Event) { got = append(got, b...) })
		close(done)
	}()
	// One producer at a time, as under the host's lock, but from many
	// goroutines.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var seq uint64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				mu.Lock()
				seq++
				q.Push(cache.Event{Kind: cache.Stored, Seq: seq})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cancel()
	<-done
	if len(got) != 4000 {
		t.Fatalf("got %d events, want 4000", len(got))
	}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: order lost", i, ev.Seq)
		}
	}
}
