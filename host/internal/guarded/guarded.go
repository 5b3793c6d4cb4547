// Package guarded holds the host's cache index together with the one lock
// that guards it. Every package that reads or changes the index (the
// executor, the engine service, the splicer, the mover, the control plane's
// stats and the daemon) is handed a *guarded.Index, never a bare lock or a
// bare index, so there is one owner of both.
//
// Do is the only way to the *cache.Index: it takes the lock, hands the
// index to a function and releases the lock when the function returns or
// panics. Code that needs the index under the lock takes it as a
// parameter (the splicer's Plan and Job.Apply, the executor's steps), so
// the compiler says where the lock is held. A panic inside Do (a bug, or
// one injected by a test) leaves no lock held and no journal open: the
// caller's recovery (a gRPC interceptor, the ingress) answers internal and
// the next call is served. What never changes after the index is built
// (page size, config, namespaces and salts) is read without the lock.
//
// Lock order, the only place it is stated. Locks are taken in this order,
// never the reverse:
//
//  1. a door's own state: the engine service's mutex (a registration opens
//     and closes pools under it), the splicer's session table (which the
//     splicer reads before it takes the index lock). An engine request's
//     own mutex is a leaf: it is held only to read or change the request,
//     never across a call into another package (host/engine, request.go);
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

	"github.com/kvpilot/kvpilot/host/blockid"
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

// Do runs fn with the lock held and releases it when fn returns or panics.
// fn must not keep the index past its return, nor call Do again. A panic in
// fn rolls back a journal it left open (the turn changed nothing) and goes
// on up to the caller's recovery.
func (g *Index) Do(fn func(ix *cache.Index)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			g.ix.AbortJournal()
			panic(p)
		}
	}()
	fn(g.ix)
}

// The reads below touch only the index's configuration, which never
// changes once it is built, so they need no lock.

// PageSize is the index's page size in tokens.
func (g *Index) PageSize() int { return g.ix.PageSize() }

// Config is the configuration the index was built with.
func (g *Index) Config() cache.Config { return g.ix.Config() }

// Namespace is tenant's cache namespace (cache.Index.Namespace).
func (g *Index) Namespace(tenant string) string { return g.ix.Namespace(tenant) }

// Salt is the hashing salt of tenant's pages (cache.Index.Salt).
func (g *Index) Salt(tenant string) blockid.Salt { return g.ix.Salt(tenant) }
