package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/tier"
)

// LossResult reports a LoseCopy. The caller frees every slot in Freed,
// the lost copy's own included (a store that found a page corrupt has
// dropped it already, and deleting an absent key is harmless).
type LossResult struct {
	// Copies counts copies removed from the tier: the page's, and those of
	// its descendants there, which prefix closure cannot keep without it.
	Copies int
	// Removed counts pages that were on no other tier and left the index.
	Removed int
	// Lost counts the removed pages that a live pin, a lease or a running
	// request held: data the index promised to keep and could not. Pinned,
	// Leased and Locked break it down (a page may count in several).
	Lost                   int
	Pinned, Leased, Locked int
	Freed                  []Freed
}

// LoseCopy records that the page's copy on tier t is gone: the disk or
// remote store found it corrupt (and dropped it), or a pool lost it. The
// copy leaves the index, and so do the copies of every descendant on t,
// because a page on a tier needs its parent there. Pages left on no tier
// leave the index, emitting removed(t) like any other removal; that
// overrides pins, leases and locks, since keeping a page would point
// readers at bytes that no longer exist. The loss is counted in the result
// instead. Locks taken through a removed page are released from its
// ancestors with it: the holder's later Unlock of the page reports
// ErrUnknownBlock and must not be retried on an ancestor.
//
// Live transitions reading or dropping a lost copy are cancelled (the
// mover sees ErrTransitionCancelled and undoes its side); the pages that
// keep a device copy after losing their host copy are queued for
// write-through again, and leases paused to t are planned again. It fails
// with ErrUnknownBlock when the page is not indexed and ErrNotResident
// when it is not on t (the copy went another way meanwhile): nothing is
// changed then. It must not run inside an open journal.
func (ix *Index) LoseCopy(tenant string, seq uint64, t tier.Tier) (LossResult, error) {
	if !t.Valid() {
		return LossResult{}, fmt.Errorf("lose copy of block %d of tenant %q: tier %d: %w", seq, tenant, t, ErrBadArgument)
	}
	n, err := ix.page("lose copy", tenant, seq)
	if err != nil {
		return LossResult{}, err
	}
	if !n.resident.Has(t) {
		return LossResult{}, fmt.Errorf("lose copy of block %d of tenant %q: not on %s: %w", seq, tenant, t, ErrNotResident)
	}
	// The subtree on t, breadth first: every page after its parent, so
	// walking it backwards removes children before parents.
	sub := append(ix.closure[:0], n)
	for i := 0; i < len(sub); i++ {
		for c := sub[i].child; c != nil; c = c.next {
			if c.resident.Has(t) {
				sub = append(sub, c)
			}
		}
	}
	ix.closure = sub
	now := ix.clock.Now()
	var res LossResult
	unsettle := false
	for i := len(sub) - 1; i >= 0; i-- {
		m := sub[i]
		if m.pending > 0 {
			ix.cancelReadsOf(m, t)
		}
		res.Freed = append(res.Freed, Freed{Tenant: m.tenant.name, Seq: m.seq, Tier: t, Loc: m.loc[t]})
		res.Copies++
		if m.resident != TierSet(0).with(t) {
			unsettle = unsettle || m.r().leaseRefs > 0
			ix.removeResidency(m, t)
			continue
		}
		res.Removed++
		if m.pinned(now) || m.r().leaseRefs > 0 || m.lockRef > 0 {
			res.Lost++
		}
		if m.pinned(now) {
			res.Pinned++
		}
		if m.r().leaseRefs > 0 {
			res.Leased++
		}
		if m.lockRef > 0 {
			res.Locked++
			// Release the locks once, from the topmost removed page: its
			// lock_ref counts every lock taken on it or below it.
			if m == n || m.parent.resident != TierSet(0).with(t) {
				ix.dropLocksThrough(m)
			}
		}
		ix.removeResidency(m, t) // the last copy: m leaves the index
	}
	if t == tier.Host {
		for _, m := range sub { // parents first, as the queue wants them
			if !m.dead && m.resident.Has(tier.Device) {
				ix.queueWriteThrough(m)
			}
		}
	}
	if unsettle {
		// A page a lease paused to t lost its copy there but lives on a
		// hotter tier: planPause must copy it down again.
		for _, l := range ix.leaseOrder {
			if l.tier == t {
				l.settled = false
			}
		}
	}
	clear(sub)
	ix.closure = sub[:0]
	ix.afterMutation()
	return res, nil
}

// cancelReadsOf cancels n's live transitions that read or drop its copy on
// t, and what waits for them.
func (ix *Index) cancelReadsOf(n *node, t tier.Tier) {
	for _, p := range ix.inflight {
		if p.live && p.n == n && p.t.From == t {
			ix.release(p)
			if p.t.Kind == Copy {
				ix.cancelDependents(p.t.ID)
			}
		}
	}
}

// dropLocksThrough forgets the locks taken on n or below it, on n and on
// each ancestor, so the ancestors' lock_ref counts only locks that can
// still be released.
func (ix *Index) dropLocksThrough(n *node) {
	k := n.lockRef
	for c := n; !c.isRoot; c = c.parent {
		c.lockRef -= k
	}
}
