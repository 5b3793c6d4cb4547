package engine

import (
	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Committed answers a Commit.
type Committed struct {
	// Stored pages entered the index; Present ones it had already.
	Stored, Present int
	// BlockHashes are the sequence hashes of the committed pages.
	BlockHashes []uint64
}

// Commit puts the first len(slots) full pages of tokens, which the engine
// wrote into slots, into the cache, in steps: check the sizes, and under
// the index lock check the slots, insert the pages, lock what the request
// wrote and hand its slots to the index; then free the slots of pages the
// index already had, and record the session's progress.
func (s *Service) Commit(regID, reqID string, tokens, slots []uint32) (Committed, error) {
	r, err := s.enter(regID, reqID)
	if err != nil {
		return Committed{}, err
	}
	defer r.leave()
	ps := s.cfg.Index.PageSize()
	if err := s.checkCommit(len(tokens), len(slots), ps); err != nil {
		return Committed{}, err
	}
	n := len(slots)
	h := blockid.Compute(tokens[:n*ps], ps, r.salt)
	p := s.currentPools()
	capSlots := p.Set.Memory(tier.Device).Stats().Capacity

	var (
		res     cache.CommitResult
		cerr    error
		deepest int
		free    []pool.Slot
	)
	s.cfg.Index.Do(func(ix *cache.Index) {
		if r.held.released {
			err = errEnded(r.id)
			return
		}
		var locs []uint64
		if locs, err = commitSlots(ix, r, h, slots, capSlots); err != nil {
			return
		}
		cerr = ix.Commit(r.tenant, h, locs, &res)
		deepest = s.lockCommitted(ix, r, h, n)
		free = s.handOver(ix, r, slots, res.Unused)
	})
	if err != nil {
		return Committed{}, err
	}
	s.freeDuplicates(r, p, free)
	s.recordCommitted(r, tokens, h, deepest+1, res.Stored)
	s.kickStep()
	if cerr != nil {
		return Committed{}, mapIndexErr(cerr, "commit %d pages of request %.64q (the first %d were committed)", n, r.id, deepest+1)
	}
	return Committed{Stored: res.Stored, Present: res.Present, BlockHashes: h.Sequence}, nil
}

// checkCommit checks a Commit's sizes: tokens within the limit, and at
// least one slot, no more than the full pages of its tokens.
func (s *Service) checkCommit(tokens, slots, ps int) error {
	full := tokens / ps
	switch {
	case tokens > s.cfg.MaxTokens:
		return errcode.New(errcode.TooMany, "%d tokens, limit %d", tokens, s.cfg.MaxTokens)
	case slots == 0:
		return errcode.New(errcode.MissingField, "page_slots")
	case slots > full:
		return errcode.New(errcode.BadRequest, "%d page_slots for %d tokens: only %d full pages of %d tokens can be committed", slots, tokens, full, ps)
	}
	return nil
}

// commitSlots checks the offered slots and returns them as the pages'
// device locations. Every slot must be one this request was allocated, or
// the slot the page already has on the device (a matched page passed
// back). ix is the index the caller holds.
func commitSlots(ix *cache.Index, r *request, h blockid.Hashes, offered []uint32, capSlots int64) ([]uint64, error) {
	locs := make([]uint64, len(offered))
	seen := make(map[uint32]bool, len(offered))
	for i, sl := range offered {
		if int64(sl) >= capSlots || seen[sl] {
			return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d: out of range (%d slots) or given twice", i, sl, capSlots)
		}
		seen[sl] = true
		if _, ok := r.held.owned[pool.Slot(sl)]; !ok {
			info, ok := ix.Lookup(r.tenant, h.Sequence[i])
			if !ok || !info.Tiers.Has(tier.Device) || info.Loc[tier.Device] != uint64(sl) {
				return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d was not allocated to request %.64q and does not hold that page", i, sl, r.id)
			}
		}
		locs[i] = uint64(sl)
	}
	return locs, nil
}

// lockCommitted locks the deepest committed page now in the index, so what
// the request wrote stays while it decodes, and returns its index (-1:
// none). A connector-mode engine decodes from its own copy and has loaded
// its matched pages before it computes anything to commit: its staging
// slots are unlocked, free to be demoted at once, so the staging tier need
// only hold the pages in flight, not every running request's prompt. ix is
// the index the caller holds.
func (s *Service) lockCommitted(ix *cache.Index, r *request, h blockid.Hashes, n int) int {
	deepest := -1
	for i := n - 1; i >= 0; i-- {
		if info, ok := ix.Lookup(r.tenant, h.Sequence[i]); ok && info.Tiers.Has(tier.Device) {
			deepest = i
			break
		}
	}
	switch {
	case r.reg.mode == ModeConnector:
		if err := s.lockPath(ix, r, 0, false); err != nil {
			s.cfg.Log.Error("unlocking staged pages failed", "request", r.id, "error", err)
		}
	case deepest >= 0 && deepest+1 > r.matched: // matched is fixed once the request is open
		if err := s.lockPath(ix, r, h.Sequence[deepest], true); err != nil {
			s.cfg.Log.Error("locking committed pages failed", "request", r.id, "error", err)
		}
	}
	return deepest
}

// handOver ends the request's ownership of the offered slots: those the
// index kept are the index's now, and their reservation ends; it returns
// those it did not take (pages it already had), which freeDuplicates frees
// and unreserves after the index lock is dropped. ix is the index the
// caller holds.
func (s *Service) handOver(ix *cache.Index, r *request, offered []uint32, notTaken []uint64) []pool.Slot {
	unused := make(map[uint64]bool, len(notTaken))
	for _, u := range notTaken {
		unused[u] = true
	}
	var free []pool.Slot
	kept := 0
	for _, sl := range offered {
		if _, ok := r.held.owned[pool.Slot(sl)]; !ok {
			continue
		}
		delete(r.held.owned, pool.Slot(sl))
		if unused[uint64(sl)] {
			free = append(free, pool.Slot(sl))
		} else {
			kept++
		}
	}
	s.unreserve(ix, r, kept)
	return free
}

// freeDuplicates frees the slots of pages the index already had, then ends
// their reservation.
func (s *Service) freeDuplicates(r *request, p *Pools, free []pool.Slot) {
	if len(free) == 0 {
		return
	}
	if err := p.Set.Memory(tier.Device).Free(free...); err != nil {
		s.cfg.Log.Error("freeing duplicate slots failed", "request", r.id, "error", err)
	}
	s.cfg.Index.Do(func(ix *cache.Index) { s.unreserve(ix, r, len(free)) })
}

// recordCommitted remembers that the first n pages of toks are cached:
// on the request when that reaches deeper than it knew (Finish's
// cache_control pins and reports that prefix), and as the session's latest
// cached sequence. stored counts the pages the index newly took, for the
// service's stats.
func (s *Service) recordCommitted(r *request, toks []uint32, h blockid.Hashes, n, stored int) {
	ps := s.cfg.Index.PageSize()
	r.mu.Lock()
	if n > len(r.committed)/ps {
		r.committed = append(r.committed[:0], toks[:n*ps]...)
		r.hashes = append(r.hashes[:0], h.Sequence[:n]...)
	}
	r.mu.Unlock()
	s.mu.Lock()
	s.sessions.commit(r.session, r.tenant, toks, n*ps, h.Sequence[:n])
	s.stats.CommittedPages += uint64(stored)
	s.mu.Unlock()
}
