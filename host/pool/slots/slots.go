// Package slots is the page-granular slot allocator every pool uses: a
// free stack with an index of positions, so Alloc, Free and Reserve of a
// particular slot are all O(1), and accounting is exact.
package slots

import (
	"fmt"
	"sync"

	"github.com/kvpilot/kvpilot/host/pool"
)

// pos values that are not stack indexes. Capacity is limited to below
// them, so they never collide with a real index.
const (
	notFree = ^uint32(0)
	pending = ^uint32(0) - 1
	// MaxCapacity is the largest number of slots an Allocator holds.
	MaxCapacity = int(pending - 1)
	// BytesPerSlot is what an Allocator holds in memory per slot, free or
	// not, from New on: a pool's bookkeeping besides its pages.
	BytesPerSlot = 8
)

// Allocator hands out slots 0..Capacity-1. It is safe for concurrent use.
type Allocator struct {
	mu   sync.Mutex
	free []uint32 // stack of free slots; top is the end
	pos  []uint32 // pos[s] = index of s in free, or notFree if allocated
}

// New returns an allocator with every slot free. Slots are handed out in
// ascending order at first, which keeps a fresh arena's pages dense.
func New(capacity int) (*Allocator, error) {
	if capacity < 0 || capacity > MaxCapacity {
		return nil, fmt.Errorf("slot allocator capacity %d is outside 0..%d", capacity, MaxCapacity)
	}
	a := &Allocator{free: make([]uint32, capacity), pos: make([]uint32, capacity)}
	for i := range capacity {
		s := uint32(capacity - 1 - i)
		a.free[i] = s
		a.pos[s] = uint32(i)
	}
	return a, nil
}

// Capacity is the number of slots.
func (a *Allocator) Capacity() int { return len(a.pos) }

// Stats returns capacity, used and free counts.
func (a *Allocator) Stats() (capacity, used, free int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, f := int64(len(a.pos)), int64(len(a.free))
	return c, c - f, f
}

// Alloc appends n slots to dst, all or nothing.
func (a *Allocator) Alloc(dst []pool.Slot, n int) ([]pool.Slot, error) {
	if n < 0 {
		return dst, fmt.Errorf("alloc %d slots: negative count", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > len(a.free) {
		return dst, fmt.Errorf("alloc %d slots: %w (%d free of %d)", n, pool.ErrFull, len(a.free), len(a.pos))
	}
	top := len(a.free) - n
	for i := len(a.free) - 1; i >= top; i-- {
		s := a.free[i]
		a.pos[s] = notFree
		dst = append(dst, pool.Slot(s))
	}
	a.free = a.free[:top]
	a.check()
	return dst, nil
}

// Free returns slots. It validates all of them before freeing any, so an
// error (ErrBadSlot, ErrDoubleFree) leaves the allocator unchanged.
func (a *Allocator) Free(slots ...pool.Slot) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Validation marks each slot pending, so a slot listed twice in one
	// call is caught as a double free without allocating; on error the
	// marks are undone.
	for i, s := range slots {
		var err error
		switch {
		case int(s) >= len(a.pos):
			err = fmt.Errorf("free slot %d: %w (capacity %d)", s, pool.ErrBadSlot, len(a.pos))
		case a.pos[s] == pending:
			err = fmt.Errorf("free slot %d: %w (listed twice)", s, pool.ErrDoubleFree)
		case a.pos[s] != notFree:
			err = fmt.Errorf("free slot %d: %w", s, pool.ErrDoubleFree)
		}
		if err != nil {
			for _, t := range slots[:i] {
				a.pos[t] = notFree
			}
			return err
		}
		a.pos[s] = pending
	}
	for _, s := range slots {
		a.pos[s] = uint32(len(a.free))
		a.free = append(a.free, uint32(s))
	}
	a.check()
	return nil
}

// Reserve takes a particular free slot, as a store rebuilding its index
// from disk does for every slot it finds occupied.
func (a *Allocator) Reserve(s pool.Slot) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if int(s) >= len(a.pos) {
		return fmt.Errorf("reserve slot %d: %w (capacity %d)", s, pool.ErrBadSlot, len(a.pos))
	}
	p := a.pos[s]
	if p == notFree {
		return fmt.Errorf("reserve slot %d: %w: already allocated", s, pool.ErrBadSlot)
	}
	// Swap with the top of the stack and pop.
	last := a.free[len(a.free)-1]
	a.free[p] = last
	a.pos[last] = p
	a.free = a.free[:len(a.free)-1]
	a.pos[s] = notFree
	a.check()
	return nil
}

// Allocated reports whether s is currently allocated.
func (a *Allocator) Allocated(s pool.Slot) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(s) < len(a.pos) && a.pos[s] == notFree
}
