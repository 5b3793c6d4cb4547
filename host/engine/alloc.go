package engine

import (
	"context"
	"errors"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Allocated answers an Allocate: the device slots the request may write,
// and how many cached pages were evicted to free them.
type Allocated struct {
	Slots   []uint32
	Evicted int
}

// Allocate gives request reqID n device slots for the pages it will
// compute. They count as used in the index until they are committed or
// the request ends, so eviction makes room for them.
func (s *Service) Allocate(ctx context.Context, regID, reqID string, n int) (Allocated, error) {
	r, err := s.enter(regID, reqID)
	if err != nil {
		return Allocated{}, err
	}
	defer r.leave()
	p := s.currentPools()
	dev := p.Set.Memory(tier.Device)
	if capPages := dev.Stats().Capacity; n < 1 || int64(n) > capPages {
		return Allocated{}, errcode.New(errcode.BadRequest, "pages %d: want 1..%d (the device arena's capacity)", n, capPages)
	}
	s.cfg.Index.Do(func(ix *cache.Index) {
		if r.held.released {
			err = errEnded(r.id)
			return
		}
		err = ix.Reserve(tier.Device, n)
	})
	if err != nil {
		return Allocated{}, mapIndexErr(err, "reserve %d device pages", n)
	}
	slots, evicted, err := s.allocSlots(ctx, p, dev, n)
	out := Allocated{Evicted: evicted}
	if err != nil {
		s.cfg.Index.Do(func(ix *cache.Index) { s.unreserve(ix, r, n) })
		st := dev.Stats()
		return out, mapIndexErr(err, "allocate %d device pages: %d of %d free; the rest hold cached pages that are locked, pinned or not yet evictable, or slots of running requests", n, st.Free, st.Capacity)
	}
	var ended bool
	s.cfg.Index.Do(func(*cache.Index) {
		if ended = r.held.released; !ended {
			for _, sl := range slots {
				r.held.owned[sl] = struct{}{}
			}
		}
	})
	if ended { // the request ended while the slots were found: they go back
		if err := dev.Free(slots...); err != nil {
			s.cfg.Log.Error("freeing the slots of an ended request failed", "request", r.id, "error", err)
		}
		s.cfg.Index.Do(func(ix *cache.Index) { s.unreserve(ix, r, n) })
		return out, errEnded(r.id)
	}
	out.Slots = make([]uint32, len(slots))
	for i, sl := range slots {
		out.Slots[i] = uint32(sl)
	}
	return out, nil
}

// allocWait bounds how long Allocate waits for eviction to free device
// slots before it answers capacity_exhausted.
const allocWait = 2 * time.Second

// allocSlots takes n device slots, evicting to make room. The caller has
// reserved them in the index, so the mover's plan counts them as used and
// evicts committed pages down to the low watermark. When a plan finds
// nothing to do, another caller's step may hold the work (its drops land
// when it finishes), so it waits a little and tries again, until allocWait
// or ctx ends. It returns the slots and how many pages its own steps
// evicted.
func (s *Service) allocSlots(ctx context.Context, p *Pools, dev pool.Memory, n int) ([]pool.Slot, int, error) {
	var slots []pool.Slot
	evicted := 0
	deadline := time.Now().Add(allocWait)
	wait := time.Millisecond
	for {
		var err error
		slots, err = dev.Alloc(slots[:0], n)
		if err == nil || !errors.Is(err, pool.ErrFull) {
			return slots, evicted, err
		}
		rep := p.Mover.Step(ctx)
		evicted += rep.Dropped
		if rep.Dropped > 0 || rep.Copied > 0 {
			wait = time.Millisecond
			continue
		}
		if time.Now().Add(wait).After(deadline) || ctx.Err() != nil {
			return nil, evicted, err
		}
		select {
		case <-ctx.Done():
			return nil, evicted, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
