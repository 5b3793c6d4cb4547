package engine

import (
	"errors"

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
	// PartsWaiting: a part's commit left this many parts to commit the
	// pages before they enter the cache (parts.go); 0 once they did.
	PartsWaiting int
}

// Commit puts the first len(slots) full pages of tokens, which the engine
// wrote into slots, into the cache: CommitFrom with the slots from the
// root.
func (s *Service) Commit(regID, reqID string, tokens, slots []uint32) (Committed, error) {
	return s.CommitFrom(regID, reqID, tokens, 0, slots)
}

// CommitFrom puts the full pages [first, first+len(slots)) of tokens,
// which the engine wrote into slots, into the cache, in steps: check the
// sizes and that the pages before first are ones the request matched or
// committed, and under the index lock check the slots, insert the pages,
// lock what the request wrote and hand its slots to the index; then free
// the slots of pages the index already had, and record the session's
// progress.
//
// first > 0 is how a connector saves a prompt in several commits: it names
// the earlier pages by their tokens alone and never sends their slots
// again. (lockCommitted keeps them on the device until the prompt is all
// committed; had they been unlocked, their slots could have gone to other
// pages, even back to this request, and a commit naming every slot from
// the root was refused.)
func (s *Service) CommitFrom(regID, reqID string, tokens []uint32, first int, slots []uint32) (Committed, error) {
	r, err := s.enter(regID, reqID)
	if err != nil {
		return Committed{}, err
	}
	defer r.leave()
	h, err := s.commitHashes(r, tokens, first, len(slots))
	if err != nil {
		return Committed{}, err
	}
	return s.commitFrom(r, tokens, h, first, slots)
}

// commitHashes checks a Commit's sizes and returns the hashes of the full
// pages it reaches, [0, first+slots).
func (s *Service) commitHashes(r *request, tokens []uint32, first, slots int) (blockid.Hashes, error) {
	ps := s.cfg.Index.PageSize()
	if err := s.checkCommit(len(tokens), first, slots, ps); err != nil {
		return blockid.Hashes{}, err
	}
	return blockid.Compute(tokens[:(first+slots)*ps], ps, r.salt), nil
}

// commitFrom is CommitFrom on the open request r, with the pages' hashes h.
func (s *Service) commitFrom(r *request, tokens []uint32, h blockid.Hashes, first int, slots []uint32) (Committed, error) {
	n := first + len(slots)
	if err := r.checkEarlier(h, first); err != nil {
		return Committed{}, err
	}
	p := s.currentPools()
	capSlots := p.Set.Memory(tier.Device).Stats().Capacity

	var (
		err     error
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
		if locs, err = commitSlots(ix, r, h, first, slots, capSlots); err != nil {
			return
		}
		if cerr = ix.CommitFrom(r.tenant, h, first, locs, &res); errors.Is(cerr, cache.ErrNotResident) {
			// Only a directive (a prune, a purge) moves a locked path: the
			// request's earlier pages are gone, and the new ones have no
			// parent to hang from.
			err = errcode.New(errcode.UnknownBlock, "request %.64q: a page before page %d left the device before the pages from it were committed (%v)", r.id, first, cerr)
			return
		}
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
		return Committed{}, mapIndexErr(cerr, "commit pages %d-%d of request %.64q (the first %d are cached)", first, n-1, r.id, deepest+1)
	}
	return Committed{Stored: res.Stored, Present: res.Present, BlockHashes: h.Sequence}, nil
}

// checkCommit checks a Commit's sizes: tokens within the limit, and at
// least one slot, no more than the full pages of its tokens.
func (s *Service) checkCommit(tokens, first, slots, ps int) error {
	full := tokens / ps
	switch {
	case tokens > s.cfg.MaxTokens:
		return errcode.New(errcode.TooMany, "%d tokens, limit %d", tokens, s.cfg.MaxTokens)
	case slots == 0:
		return errcode.New(errcode.MissingField, "page_slots")
	case first+slots > full:
		return errcode.New(errcode.BadRequest, "%d page_slots from page %d for %d tokens: only %d full pages of %d tokens can be committed", slots, first, tokens, full, ps)
	}
	return nil
}

// checkEarlier checks that the pages before first are pages r matched or
// committed: the tokens name them, and only the request's own record says
// they were computed for it.
func (r *request) checkEarlier(h blockid.Hashes, first int) error {
	if first == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	known := len(r.hashes)
	for i := range min(first, known) {
		if r.hashes[i] != h.Sequence[i] {
			known = i
			break
		}
	}
	if known < first {
		return errcode.New(errcode.BadRequest, "first_page %d: request %.64q matched or committed only the first %d pages of these tokens; send page_slots from page %d", first, r.id, known, known)
	}
	return nil
}

// commitSlots checks the slots offered for pages [first, first+len) and
// returns them as the pages' device locations. Every slot must be one this
// request was allocated, or the slot the page already has on the device (a
// matched page passed back). ix is the index the caller holds.
func commitSlots(ix *cache.Index, r *request, h blockid.Hashes, first int, offered []uint32, capSlots int64) ([]uint64, error) {
	locs := make([]uint64, len(offered))
	seen := make(map[uint32]bool, len(offered))
	for j, sl := range offered {
		i := first + j
		if int64(sl) >= capSlots || seen[sl] {
			return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d: out of range (%d slots) or given twice", j, sl, capSlots)
		}
		seen[sl] = true
		if _, ok := r.held.owned[pool.Slot(sl)]; !ok {
			info, ok := ix.Lookup(r.tenant, h.Sequence[i])
			if !ok || !info.Tiers.Has(tier.Device) || info.Loc[tier.Device] != uint64(sl) {
				return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d (page %d) was not allocated to request %.64q and does not hold that page", j, sl, i, r.id)
			}
		}
		locs[j] = uint64(sl)
	}
	return locs, nil
}

// lockCommitted locks the deepest committed page now in the index, so what
// the request wrote stays while it decodes, and returns its index (-1:
// none). ix is the index the caller holds.
//
// A connector-mode engine decodes from its own copy and has loaded its
// matched pages before it computes anything to commit, so once its whole
// prompt is committed its staging slots are unlocked, free to be demoted
// at once: the staging tier need only hold the pages in flight, not every
// running request's prompt. Until then (a prompt prefilled in chunks is
// saved in several commits) the committed path stays locked, so the next
// commit extends a path that is still on the device: unlocked, its pages
// could be demoted and their slots handed to other pages in between.
func (s *Service) lockCommitted(ix *cache.Index, r *request, h blockid.Hashes, n int) int {
	deepest := -1
	for i := n - 1; i >= 0; i-- {
		if info, ok := ix.Lookup(r.tenant, h.Sequence[i]); ok && info.Tiers.Has(tier.Device) {
			deepest = i
			break
		}
	}
	var err error
	switch {
	case r.reg.mode == ModeConnector && (deepest < 0 || deepest+1 >= len(r.prompt)/s.cfg.Index.PageSize()):
		err = s.lockPath(ix, r, 0, false)
	case deepest >= 0 && (r.reg.mode == ModeConnector || deepest+1 > r.matched): // matched is fixed once the request is open
		err = s.lockPath(ix, r, h.Sequence[deepest], true)
	}
	if err != nil {
		s.cfg.Log.Error("locking committed pages failed", "request", r.id, "error", err)
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
