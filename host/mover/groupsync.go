package mover

import "sync"

// groupSync coalesces store syncs: every copy to disk must be durable
// before the index is told it landed (a store event promises the bytes are
// there), but one fdatasync can cover every write finished before it
// started. A caller waits for the first sync that starts after it asked.
type groupSync struct {
	fn       func() error
	mu       sync.Mutex
	cond     *sync.Cond
	started  uint64
	finished uint64
	running  bool
	err      error
}

func newGroupSync(fn func() error) *groupSync {
	g := &groupSync{fn: fn}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Sync returns once a sync that started after the call has finished, with
// that sync's error.
func (g *groupSync) Sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	target := g.started + 1
	for g.finished < target {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		n := g.started
		g.mu.Unlock()
		err := g.fn()
		g.mu.Lock()
		g.running = false
		g.finished = n
		g.err = err
		g.cond.Broadcast()
	}
	return g.err
}
