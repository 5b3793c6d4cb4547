package mover

import (
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
)

// Failures that arrive while one report runs go to the index together, in
// the next report, and every caller returns only once its own was
// reported.
func TestFailGroupReportsWhatQueuedMeanwhileAtOnce(t *testing.T) {
	const n = 200
	var (
		mu       sync.Mutex
		calls    [][]cache.Transition
		reported = map[uint64]int{}
	)
	first := make(chan struct{})
	var g *failGroup
	g = newFailGroup(func(ts []cache.Transition) {
		mu.Lock()
		calls = append(calls, ts)
		for _, t := range ts {
			reported[t.ID]++
		}
		isFirst := len(calls) == 1
		mu.Unlock()
		if isFirst {
			<-first // hold the first report until every other failure queued
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() { g.fail(cache.Transition{ID: 0}) })
	for i := 1; i < n; i++ {
		wg.Go(func() {
			g.fail(cache.Transition{ID: uint64(i)})
			mu.Lock()
			defer mu.Unlock()
			if reported[uint64(i)] != 1 {
				t.Errorf("fail(#%d) returned before its report", i)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d failures queued", queued, n-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(first)
	wg.Wait()
	if len(calls) != 2 || len(calls[0]) != 1 || len(calls[1]) != n-1 {
		t.Fatalf("%d reports, want 2 (1 and %d transitions)", len(calls), n-1)
	}
	for i := range uint64(n) {
		if reported[i] != 1 {
			t.Fatalf("#%d reported %d times", i, reported[i])
		}
	}
}
