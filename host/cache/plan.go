package cache

import (
	"container/heap"
	"fmt"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Plan returns, appended to dst, the transitions the mover should run now:
//
//  1. write-through copies of device pages to the host tier, with any
//     ancestors the host lost meanwhile (root first);
//  2. pause work: copies of leased pages to their pause tier, then drops of
//     their hotter copies (leases backing off after a failure wait,
//     lease_health.go);
//  3. disk copies of pinned pages, so pins outlive the host (pin_durable.go);
//  4. eviction, hot tier first, on every tier whose usage (resident plus
//     planned copies in, minus planned drops, plus the copies above that
//     found no room there) exceeds its high watermark, down to its low
//     watermark.
//
// Eviction takes tier leaves only (pages with no child on that tier), never
// a locked page, one a healthy (not degraded) lease holds, nor one with a
// transition in flight. It takes unprioritized or lapsed pages by LRU
// first, then pages by ascending retention priority then LRU, and pinned
// pages last. A device page whose only copy it is gets a demotion (copy to
// the next tier, then drop) when it is pinned, or when the write policy
// keeps backups and it is not transient; otherwise it is dropped. A pinned
// page's last copy is never dropped: when it cannot be demoted it stays. On
// colder tiers pinned pages are skipped until their pin lapses.
func (ix *Index) Plan(now time.Duration, dst []Transition) []Transition {
	clear(ix.roomWant[:])
	dst = ix.planWriteThrough(dst)
	dst = ix.planPause(now, dst)
	dst = ix.planPinDurable(now, dst)
	for _, t := range tier.All {
		if ix.present(t) {
			dst = ix.planEvict(t, now, dst)
		}
	}
	// A lease that found no room on its pause tier, where eviction could
	// not start making any, is set back (lease_health.go) rather than
	// planned again at every step.
	for _, l := range ix.starved {
		if ix.pendingDrop[l.tier] == 0 {
			ix.leaseSetback(l, now, fmt.Sprintf("no room on %s: its pages are pinned, leased, locked or moving", l.tier))
		}
	}
	clear(ix.starved)
	ix.starved = ix.starved[:0]
	ix.afterMutation()
	return dst
}

func (ix *Index) used(t tier.Tier) int {
	return ix.resident[t] + ix.pendingIn[t] - ix.pendingDrop[t] + ix.reserved[t]
}

// copySource is the hottest tier holding n that no planned drop is freeing.
func copySource(n *node) (tier.Tier, bool) {
	return (n.resident &^ n.dropping).Hottest()
}

// parentReady reports whether n's parent is (or is being copied) on t, and
// the copy to wait for.
func parentReady(n *node, t tier.Tier) (after uint64, ok bool) {
	p := n.parent
	switch {
	case p.isRoot || p.resident.Has(t):
		return 0, true
	case p.inbound.Has(t):
		return p.lastCopy, true
	}
	return 0, false
}

func (ix *Index) planWriteThrough(dst []Transition) []Transition {
	if len(ix.wtQueue) == 0 {
		return dst
	}
	capHost := ix.cfg.Tiers[tier.Host].Capacity
	keep := ix.wtQueue[:0]
	for _, n := range ix.wtQueue {
		switch {
		case n.dead, n.transient, !n.resident.Has(tier.Device), n.resident.Has(tier.Host),
			n.inbound.Has(tier.Host), n.dropping.Has(tier.Device):
			continue // no longer needs it, or already under way
		}
		// The chain, not the page alone: while n waited for room, the
		// host's eviction may have taken its parent (a leaf there, n not yet
		// copied), and nothing else would copy the parent again.
		chain, can := ix.chainTo(n, tier.Host)
		switch {
		case can == chainNever:
			continue // a transient ancestor is never on the host, so neither is n
		case can == chainLater:
			keep = append(keep, n) // an ancestor is moving: retry
		case ix.used(tier.Host)+len(chain) > capHost:
			ix.roomWant[tier.Host] += len(chain) // the host's eviction makes the room
			keep = append(keep, n)
		default:
			dst = ix.reserveChain(chain, tier.Device, tier.Host, ReasonWriteThrough, dst)
		}
	}
	clear(ix.wtQueue[len(keep):])
	ix.wtQueue = keep
	return dst
}

func (ix *Index) planPause(now time.Duration, dst []Transition) []Transition {
	for _, l := range ix.leaseOrder {
		if l.settled || now < l.retryAt {
			continue // settled, or backing off after a failed attempt
		}
		settled := true
		P := l.tier
		want := 0
		for _, n := range l.pages { // root first: parents are copied first
			if n.dead || n.transient || n.resident.Has(P) {
				continue
			}
			settled = false
			if n.inbound.Has(P) || n.pending > 0 {
				continue
			}
			after, ok := parentReady(n, P)
			src, okSrc := copySource(n)
			switch {
			case !ok || !okSrc:
			case ix.used(P) >= ix.cfg.Tiers[P].Capacity:
				// No slot: a copy planned now could only fail. Ask the
				// tier's eviction (below) for the room instead.
				want++
			default:
				dst = append(dst, ix.reserve(n, Copy, ReasonPause, src, P, after))
			}
		}
		if want > 0 {
			ix.roomWant[P] += want
			ix.starved = append(ix.starved, l)
		}
		// Free hotter copies, deepest first, once the pause copy has landed.
		for _, t := range tier.All {
			if !P.Colder(t) {
				break
			}
			epoch := ix.nextEpoch()
			for i := len(l.pages) - 1; i >= 0; i-- {
				n := l.pages[i]
				if n.dead || !n.resident.Has(t) || !n.resident.Has(P) {
					continue
				}
				left := n.childrenOn[t]
				if n.planMark == epoch {
					left = n.planLeft
				}
				if left > 0 {
					// Children still on t: either lease pages that are
					// themselves unsettled, or pages outside the lease
					// (a shared prefix keeps its hot copies).
					continue
				}
				settled = false
				if n.pending > 0 || n.lockRef > 0 {
					continue
				}
				dst = append(dst, ix.reserve(n, Drop, ReasonPause, t, 0, 0))
				ix.notePlannedDrop(n, t, epoch)
			}
		}
		l.settled = settled
		if settled {
			ix.leaseHealthy(l)
		}
	}
	return dst
}

// notePlannedDrop counts a planned drop of n from t against its parent's
// children on t, so the parent can become a leaf in the same plan.
func (ix *Index) notePlannedDrop(n *node, t tier.Tier, epoch uint32) (parentFree bool) {
	p := n.parent
	if p.isRoot {
		return false
	}
	if p.planMark != epoch {
		p.planMark = epoch
		p.planLeft = p.childrenOn[t]
	}
	p.planLeft--
	return p.planLeft == 0
}

// evictClass orders eviction: 0 unprioritized or lapsed, 1 retained, 2 pinned.
func evictClass(n *node, now time.Duration) int {
	switch {
	case n.pinned(now):
		return 2
	case n.prioritized(now):
		return 1
	}
	return 0
}

type evictHeap struct {
	nodes []*node
	now   time.Duration
}

func (h *evictHeap) Len() int { return len(h.nodes) }
func (h *evictHeap) Less(i, j int) bool {
	a, b := h.nodes[i], h.nodes[j]
	ca, cb := evictClass(a, h.now), evictClass(b, h.now)
	if ca != cb {
		return ca < cb
	}
	if ca == 1 && a.priority != b.priority {
		return a.priority < b.priority
	}
	if a.lastAccess != b.lastAccess {
		return a.lastAccess < b.lastAccess
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return strings.Compare(a.tenant.name, b.tenant.name) < 0
}
func (h *evictHeap) Swap(i, j int) { h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i] }
func (h *evictHeap) Push(x any)    { h.nodes = append(h.nodes, x.(*node)) }
func (h *evictHeap) Pop() any {
	n := h.nodes[len(h.nodes)-1]
	h.nodes = h.nodes[:len(h.nodes)-1]
	return n
}

// evictable: may n be taken from t at all (leafness aside)?
func evictable(n *node, t tier.Tier, now time.Duration) bool {
	switch {
	case n.dead, !n.resident.Has(t), n.pending > 0, n.lockRef > 0, n.leaseHeld():
		return false
	case t != tier.Device && n.pinned(now):
		return false // colder tiers keep pinned pages until the pin lapses
	}
	return true
}

func (ix *Index) planEvict(t tier.Tier, now time.Duration, dst []Transition) []Transition {
	tc := ix.cfg.Tiers[t]
	used := ix.used(t) + ix.roomWant[t] // copies waiting for room count as used
	if float64(used) <= tc.High*float64(tc.Capacity) {
		return dst
	}
	target := int(tc.Low * float64(tc.Capacity))
	h := &evictHeap{now: now}
	for _, ts := range ix.tenants {
		for _, n := range ts.bySeq {
			if n.childrenOn[t] == 0 && evictable(n, t, now) {
				h.nodes = append(h.nodes, n)
			}
		}
	}
	heap.Init(h)
	epoch := ix.nextEpoch()
	for used > target && h.Len() > 0 {
		n := heap.Pop(h).(*node)
		if !evictable(n, t, now) { // an earlier demotion may have reserved it
			continue
		}
		planned := false
		dst, planned = ix.planEvictOne(n, t, now, dst)
		if !planned {
			continue
		}
		used--
		if ix.notePlannedDrop(n, t, epoch) && evictable(n.parent, t, now) {
			heap.Push(h, n.parent)
		}
	}
	return dst
}

// planEvictOne plans taking n off t: a drop, or a demotion (copy to the
// next present colder tier, then drop). It reports whether a drop was
// planned.
func (ix *Index) planEvictOne(n *node, t tier.Tier, now time.Duration, dst []Transition) ([]Transition, bool) {
	last := n.resident == TierSet(0).with(t)
	if !last {
		return append(dst, ix.reserve(n, Drop, ReasonEvict, t, 0, 0)), true
	}
	pinned := n.pinned(now)
	if t != tier.Device {
		// Pinned pages never reach here (evictable); others are dropped.
		return append(dst, ix.reserve(n, Drop, ReasonEvict, t, 0, 0)), true
	}
	backup := pinned || (ix.cfg.DeviceWrite != WriteNone && !n.transient)
	if backup && !n.transient {
		if to, ok := ix.colderPresent(t); ok {
			var copied bool
			if dst, copied = ix.planCopyChain(n, t, to, ReasonDemote, ix.cfg.Tiers[to].Capacity, dst); copied {
				cp := dst[len(dst)-1]
				return append(dst, ix.reserve(n, Drop, ReasonDemote, t, 0, cp.ID)), true
			}
		}
	}
	if pinned {
		return dst, false // never drop a pinned page's last copy
	}
	return append(dst, ix.reserve(n, Drop, ReasonEvict, t, 0, 0)), true
}

func (ix *Index) colderPresent(t tier.Tier) (tier.Tier, bool) {
	for u := t + 1; int(u) < tier.Count; u++ {
		if ix.present(u) {
			return u, true
		}
	}
	return 0, false
}

// planCopyChain plans copies of n and of any ancestors missing on to (root
// first), when all of them can be copied and keep to's usage within room;
// the copy of n is last.
func (ix *Index) planCopyChain(n *node, from, to tier.Tier, reason Reason, room int, dst []Transition) ([]Transition, bool) {
	chain, can := ix.chainTo(n, to)
	if can != chainNow || ix.used(to)+len(chain) > room {
		return dst, false
	}
	return ix.reserveChain(chain, from, to, reason, dst), true
}

// chainState says whether a chain of copies can be planned (chainTo).
type chainState uint8

const (
	chainNow   chainState = iota
	chainLater            // a page of it is moving, or has no copy to read
	chainNever            // a page of it is transient: never copied
)

// chainTo is n and its ancestors missing on to, n first (a scratch slice
// valid until the next call), and whether their copies can be planned now.
func (ix *Index) chainTo(n *node, to tier.Tier) ([]*node, chainState) {
	chain := ix.nodes[:0]
	defer func() { ix.nodes = chain[:0] }()
	for c := n; !c.isRoot && !c.resident.Has(to) && !c.inbound.Has(to); c = c.parent {
		if c.transient {
			return nil, chainNever
		}
		if _, ok := copySource(c); !ok || (c != n && c.pending > 0) {
			return nil, chainLater
		}
		chain = append(chain, c)
	}
	return chain, chainNow
}

// reserveChain plans the copies of chain (chainTo's), root first, n's from
// from and each ancestor's from its hottest copy.
func (ix *Index) reserveChain(chain []*node, from, to tier.Tier, reason Reason, dst []Transition) []Transition {
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		after, _ := parentReady(c, to)
		src, _ := copySource(c)
		if i == 0 {
			src = from
		}
		dst = append(dst, ix.reserve(c, Copy, reason, src, to, after))
	}
	return dst
}
