// Package guarded holds the host's cache index together with the one lock
// that guards it. Every package that reads or changes the index (the
// executor, the engine service, the splicer, the mover, the control plane's
// watch and the daemon) is handed a *guarded.Index, never a bare lock or a
// bare index, so there is one owner of both.
//
// Lock order, the only place it is stated. Locks are taken in this order,
// never the reverse:
//
//  1. a door's own state: an engine request's mutex (a Finish pins while it
//     holds its request), the engine service's mutex, the splicer's session
//     table (which the splicer reads before it takes the index lock);
//  2. the index lock (this package);
//  3. the pools' own locks (an arena's mapping lock), which are leaves.
//
// No I/O to the disk or remote tier happens under the index lock: the mover
// takes it around each index call only. The splicer's kernel work on device
// pages is the exception, because the pages it moves must not change while
// it runs; it is memory work, bounded by the turn.
package guarded

import (
	"sync"

	"github.com/kvpilot/kvpilot/host/cache"
)

// Index is the cache index and its lock.
type Index struct {
	mu sync.Mutex
	ix *cache.Index
}

// New wraps ix. The index must not be reached other than through the
// returned Index from then on.
func New(ix *cache.Index) *Index {
	if ix == nil {
		panic("guarded: nil index")
	}
	return &Index{ix: ix}
}

// Lock takes the index lock and returns the index, for use until Unlock.
func (g *Index) Lock() *cache.Index {
	g.mu.Lock()
	return g.ix
}

// Unlock releases the index lock.
func (g *Index) Unlock() { g.mu.Unlock() }

// Do runs fn with the lock held.
func (g *Index) Do(fn func(ix *cache.Index)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(g.ix)
}

// Held returns the index to code that runs inside a Lock/Unlock pair taken
// further up its own call chain (the executor's check and apply steps, the
// engine service's calls), and to reads of what never changes after the
// index is built (Config, PageSize, Salt).
func (g *Index) Held() *cache.Index { return g.ix }
