package engine

import (
	"context"
	"errors"
	"time"

	"github.com/kvpilot/kvpilot/host/pool"
)

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

// reasoningPages returns the hashes of the committed pages that hold only
// reasoning tokens: the first reasoning tokens of the output, which begins
// after the prompt (engines emit the thinking before the answer). They are
// candidates for a transient mark (think-evict).
func reasoningPages(hashes []uint64, pageSize, prompt, reasoning int) []uint64 {
	if reasoning <= 0 || pageSize <= 0 {
		return nil
	}
	var out []uint64
	first := (prompt + pageSize - 1) / pageSize
	for i := first; i < len(hashes) && (i+1)*pageSize <= prompt+reasoning; i++ {
		out = append(out, hashes[i])
	}
	return out
}
