package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
)

// pageCopy is one copy transition under way: the pools it reads and
// writes, the destination it took, and the outcome it reports. Each step
// returns false once the copy has failed, after undoing what it made and
// reporting the failure to the index.
type pageCopy struct {
	m   *Mover
	ctx context.Context
	t   cache.Transition
	o   *outcome
	key pool.Key

	srcMem   pool.Memory
	srcStore pool.Store
	dstMem   pool.Memory
	dstStore pool.Store
	entry    pool.Entry // what a stored page carries (dstStore)
	dstSlot  pool.Slot  // the slot taken (dstMem)
}

// prepare finds the pools and takes the destination: a slot in a memory
// tier, or the page's tree links for a store.
func (c *pageCopy) prepare() bool {
	m, t := c.m, c.t
	c.srcMem, c.srcStore = m.pools.Memory(t.From), m.pools.Store(t.From)
	c.dstMem, c.dstStore = m.pools.Memory(t.To), m.pools.Store(t.To)
	if (c.srcMem == nil && c.srcStore == nil) || (c.dstMem == nil && c.dstStore == nil) {
		m.fail(t)
		c.o.err = fmt.Errorf("%w: %s or %s", ErrNoPool, t.From, t.To)
		return false
	}
	if c.dstStore != nil {
		// A stored page carries its tree links, so a restarted host or
		// another host can put it back in its index.
		found := false
		m.ix.Do(func(ix *cache.Index) {
			pi, ok := ix.Lookup(t.Tenant, t.Seq)
			found = ok
			c.entry = pool.Entry{Key: c.key, Local: pi.Local, Parent: pi.Parent, HasParent: pi.HasParent}
		})
		if !found {
			m.fail(t)
			c.o.err = ErrPageGone
			return false
		}
	}
	if c.dstMem != nil {
		s, err := c.dstMem.Alloc(nil, 1)
		if err != nil {
			m.fail(t)
			c.o.err = err
			return false
		}
		c.dstSlot = s[0]
	}
	return true
}

// transfer moves the bytes. Fast paths skip the staging buffer: read
// straight from a contiguous source page, or straight into a contiguous
// destination page. A page leaving a sealed tier is checked, a page
// entering one is sealed (seal.go).
func (c *pageCopy) transfer() bool {
	view, ok, err := pageView(c.srcMem, pool.Slot(c.t.FromLoc))
	if err != nil {
		c.undo(fmt.Errorf("source: %w", err))
		return false
	}
	if ok {
		return c.writeChecked(view) && c.seal(view)
	}
	if view, ok, err = pageView(c.dstMem, c.dstSlot); err != nil {
		c.undo(fmt.Errorf("destination: %w", err))
		return false
	} else if ok {
		return c.read(view) && c.seal(view)
	}
	buf := c.m.getBuf()
	defer c.m.putBuf(buf)
	return c.read(*buf) && c.write(*buf) && c.seal(*buf)
}

// writeChecked writes src, the live source page, checking it against its
// seal when its tier is sealed: beside the write into memory (a slot found
// corrupt is freed again), before a write into a store (which would keep
// it).
func (c *pageCopy) writeChecked(src []byte) bool {
	sl := c.m.seals
	if !sl.covers(c.t.From) {
		return c.write(src)
	}
	slot := pool.Slot(c.t.FromLoc)
	if c.dstMem == nil {
		if err := sl.check(slot, sealOf(src)); err != nil {
			c.readFailed(err)
			return false
		}
		return c.write(src)
	}
	h := startSideHash(src)
	ok := c.write(src)
	sum := h.wait()
	if !ok {
		return false
	}
	if err := sl.check(slot, sum); err != nil {
		c.readFailed(err)
		return false
	}
	return true
}

// seal records the checksum of page, just written, when the destination
// tier is sealed.
func (c *pageCopy) seal(page []byte) bool {
	if c.dstMem != nil && c.m.seals.covers(c.t.To) {
		c.m.seals.set(c.dstSlot, page)
	}
	return true
}

// read reads the source page into into.
func (c *pageCopy) read(into []byte) bool {
	err := c.m.retry(c.ctx, func() error {
		if c.srcMem != nil {
			return c.srcMem.ReadPage(pool.Slot(c.t.FromLoc), into)
		}
		return c.srcStore.Get(c.ctx, c.key, into)
	})
	if err != nil {
		c.readFailed(err)
		return false
	}
	return true
}

// write writes src to the destination (a store's write is synced).
func (c *pageCopy) write(src []byte) bool {
	var err error
	if c.dstMem != nil {
		err = c.m.retry(c.ctx, func() error { return c.dstMem.WritePage(c.dstSlot, src) })
	} else {
		err = c.m.retry(c.ctx, func() error { return c.dstStore.Put(c.ctx, c.entry, src) })
		if err == nil {
			err = c.m.syncs[c.t.To].Sync()
		}
	}
	if err != nil {
		c.undo(fmt.Errorf("write to %s: %w", c.t.To, err))
		return false
	}
	return true
}

// undo frees the destination slot and reports the copy failed.
func (c *pageCopy) undo(err error) {
	if c.dstMem != nil {
		if ferr := c.dstMem.Free(c.dstSlot); ferr != nil {
			c.m.log.Error("freeing the slot of a failed copy", "tier", c.t.To.String(), "slot", c.dstSlot, "error", ferr)
		}
	}
	c.m.fail(c.t)
	c.o.err = err
}

// readFailed undoes the copy; a source found corrupt (only a store's read
// reports that, after dropping the page) also leaves the index. It is
// forgotten before the copy is reported failed: while the copy is live the
// index keeps the copy it reads in place (a drop waits for it), so
// LoseCopy forgets exactly the copy found corrupt.
func (c *pageCopy) readFailed(err error) {
	var freed []cache.Freed
	if errors.Is(err, pool.ErrCorrupt) {
		c.o.corrupt = &c.key
		freed = c.m.loseCorrupt(c.t, c.o)
	}
	c.undo(fmt.Errorf("read from %s: %w", c.t.From, err))
	if len(freed) > 0 {
		// The frees outlive ctx (a load-back's deadline may have passed):
		// leaving them undone would strand objects no index lists.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.m.o.DropWait)
		defer cancel()
		if err := c.m.Release(rctx, freed); err != nil {
			c.m.log.Error("freeing the copies of a corrupt page", "tier", c.t.From.String(), "error", err)
		}
	}
}

// complete reports the copy to the index. When the index declines (the
// page changed while the copy ran), what the copy made is freed, unless
// the index knows a copy of this page there (a store key is shared by
// every copy of the page).
func (c *pageCopy) complete() {
	m, t := c.m, c.t
	var err error
	m.ix.Do(func(ix *cache.Index) { err = ix.CompleteCopy(t, uint64(c.dstSlot)) })
	if err == nil {
		c.o.bytes = int64(m.pb)
		return
	}
	if errors.Is(err, cache.ErrUnknownTransition) {
		c.o.err = err
	} else {
		c.o.refused = true
	}
	if c.dstMem != nil {
		if ferr := c.dstMem.Free(c.dstSlot); ferr != nil {
			m.log.Error("freeing the slot of a refused copy", "tier", t.To.String(), "slot", c.dstSlot, "error", ferr)
		}
		return
	}
	var known bool
	m.ix.Do(func(ix *cache.Index) {
		pi, ok := ix.Lookup(t.Tenant, t.Seq)
		known = ok && pi.Tiers.Has(t.To)
	})
	if !known {
		if derr := c.dstStore.Delete(c.ctx, c.key); derr != nil {
			m.log.Warn("deleting the object of a refused copy", "tier", t.To.String(), "key", c.key.String(), "error", derr)
		}
	}
}
