package mover

import (
	"context"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// makeRoom frees slots in the memory pool of tier to for the copies ts
// bring there: it reserves them in the index, so the next plans count them
// as used and evict committed pages (never pinned, locked or leased ones)
// down to the low watermark, and steps until the pool has room, ctx ends,
// or alreadyWait passes (a fetch without a deadline must not spin when
// nothing is evictable; its copies then fail for want of slots). Without it a load-back into a full device tier fails for want of
// slots while evictable pages sit there: the pinned prefix of a session
// that was demoted under pressure could never come back.
func (m *Mover) makeRoom(ctx context.Context, ts []cache.Transition, to tier.Tier) {
	need := 0
	for _, t := range ts {
		if t.Kind == cache.Copy && t.To == to {
			need++
		}
	}
	m.MakeRoom(ctx, to, need)
}

// MakeRoom frees need slots in tier to's memory pool, as a load-back does
// (makeRoom), for a caller about to take them outside a transition: a
// splice's fresh device pages, which a staging tier held just under its
// high watermark by a connector's saves would otherwise refuse.
func (m *Mover) MakeRoom(ctx context.Context, to tier.Tier, need int) {
	pool := m.pools.Memory(to)
	if pool == nil || need <= 0 || pool.Stats().Free >= int64(need) {
		return
	}
	var reserved bool
	m.ix.Do(func(ix *cache.Index) { reserved = ix.Reserve(to, need) == nil })
	if !reserved {
		return
	}
	defer m.ix.Do(func(ix *cache.Index) {
		if err := ix.Unreserve(to, need); err != nil {
			m.log.Error("unreserving load-back slots", "error", err)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, alreadyWait)
	defer cancel()
	wait := time.Millisecond
	for pool.Stats().Free < int64(need) && ctx.Err() == nil {
		r := m.Step(ctx)
		if r.Dropped > 0 || r.Copied > 0 {
			wait = time.Millisecond
			continue
		}
		// Nothing to do in this plan: another caller's step may hold the
		// drops, or nothing is evictable; wait a little and look again.
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}
