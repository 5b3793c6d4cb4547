package mover

import (
	"sync"

	"github.com/kvpilot/kvpilot/host/cache"
)

// failGroup reports the transitions the mover gives up on to the index in
// groups. When a step's context is cancelled (the host stops) every
// transition of its batch fails at once (1,160 in the stop that showed
// it); one index call for those queued meanwhile takes the lock once,
// where one call each would queue them all on it (and an invariants build
// would check the whole index after each, which held a stop under load
// past 30 s). A caller returns once its own transition was reported, so a
// transition waiting for it finds the failure in the index.
type failGroup struct {
	report func([]cache.Transition)

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []cache.Transition
	queued   uint64 // transitions ever queued
	reported uint64 // of those, reported (in queue order)
	running  bool
}

func newFailGroup(report func([]cache.Transition)) *failGroup {
	g := &failGroup{report: report}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// fail queues t and returns once it has been reported: the first caller
// to find no report running reports everything queued, itself included.
func (g *failGroup) fail(t cache.Transition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(g.queue, t)
	g.queued++
	mine := g.queued
	for g.reported < mine {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.drain()
	}
}

// drain reports the queue with g.mu released meanwhile; a panic in report
// still frees the waiters' turn.
func (g *failGroup) drain() {
	batch := g.queue
	g.queue = nil
	g.running = true
	defer func() {
		g.running = false
		g.reported += uint64(len(batch))
		g.cond.Broadcast()
	}()
	g.mu.Unlock()
	defer g.mu.Lock()
	g.report(batch)
}
