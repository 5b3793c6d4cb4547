package cache

import (
	"math/bits"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// TierSet is a set of tiers, one bit per tier.Tier.
type TierSet uint8

// Has reports whether t is in the set.
func (s TierSet) Has(t tier.Tier) bool { return s&(1<<t) != 0 }

// Count returns the number of tiers in the set.
func (s TierSet) Count() int { return bits.OnesCount8(uint8(s)) }

// Hottest returns the hottest tier in the set; ok is false for the empty set.
func (s TierSet) Hottest() (t tier.Tier, ok bool) {
	if s == 0 {
		return 0, false
	}
	return tier.Tier(bits.TrailingZeros8(uint8(s))), true
}

// Tiers lists the set hot to cold.
func (s TierSet) Tiers() []tier.Tier {
	var out []tier.Tier
	for _, t := range tier.All {
		if s.Has(t) {
			out = append(out, t)
		}
	}
	return out
}

func (s TierSet) with(t tier.Tier) TierSet    { return s | 1<<t }
func (s TierSet) without(t tier.Tier) TierSet { return s &^ (1 << t) }

// node is one full page. Children hang off an intrusive sibling list, and
// a page's identity (tenant, seq) maps to it through tenantState.bySeq, so a
// child lookup is one map probe of Chain(parent.seq, local).
//
// Splice will re-link a downstream subtree under new hashes:
// the subtree is detached with unlink, its seq keys re-chained and re-keyed
// in bySeq, and it is linked under the new parent. Nothing else in a node
// depends on its position, which is what keeps that possible.
type node struct {
	tenant *tenantState
	parent *node // the tenant's root sentinel for first pages
	child  *node // first child
	prev   *node // siblings
	next   *node

	seq, local uint64
	loc        [tier.Count]uint64
	resident   TierSet
	// priority and transient sit beside resident: the small fields are
	// grouped so the record packs without padding (bench index measures
	// its bytes per page).
	priority  uint8
	transient bool
	// childrenOn counts children resident per tier: a page is a leaf on
	// tier t, and may be dropped from it, when childrenOn[t] is zero.
	childrenOn [tier.Count]uint32
	// childDrops counts children with a live drop planned from each tier
	// (never above childrenOn): when they are equal, a drop of this page
	// from that tier only waits for its children's drops to complete.
	childDrops [tier.Count]uint32
	nchildren  uint32

	lockRef uint32

	pinCount   uint32
	journalGen uint64 // == Index.jr.gen when saved in the open journal
	// rare holds what only pinned, retained or leased pages need (nil for
	// the others); read it with r and write it with w.
	rare *rare

	lastAccess time.Duration

	// In-flight transitions touching this page.
	lastCopy uint64 // id of the latest live copy, for After chains
	pending  uint32
	inbound  TierSet           // tiers a live copy is writing to
	dropping TierSet           // tiers a live drop will free
	srcBusy  [tier.Count]uint8 // live copies reading from each tier
	isRoot   bool
	dead     bool // removed from the index; kept only by stale references

	mark  uint32
	depth uint32

	// planLeft is Plan's scratch count of children still resident on the
	// tier being planned, valid when planMark matches the plan's epoch.
	planMark uint32
	planLeft uint32
}

// rare is the part of a page's record that few pages use: its pin's TTL,
// expiry and place in the pinned list, a retention's expiry and the leases
// holding it. Keeping it out of node puts the common page in a smaller
// allocation class: bench index measures bytes per cached page, and the
// pages a long-running host holds are mostly neither pinned nor leased.
type rare struct {
	pinTTL       time.Duration
	pinExpiry    time.Duration
	pinPrev      *node // pinned list, while pinCount > 0
	pinNext      *node
	retainExpiry time.Duration
	leaseRefs    uint32 // live leases holding this page
	degradedRefs uint32 // of them, those degraded (lease_health.go)
	lease        *lease // the most recent of them
}

// noRare is what r returns for a page without a rare record. It is never
// written: writers go through w, and Check verifies it stayed zero.
var noRare rare

// r returns the page's rare fields for reading.
func (n *node) r() *rare {
	if n.rare == nil {
		return &noRare
	}
	return n.rare
}

// w returns the page's rare fields for writing, making the record on
// first use.
func (n *node) w() *rare {
	if n.rare == nil {
		n.rare = new(rare)
	}
	return n.rare
}

// tidy drops a rare record that holds nothing any more (a pin, a
// retention or a lease ended), so the page costs what a plain page costs.
func (n *node) tidy() {
	if n.rare != nil && *n.rare == (rare{}) {
		n.rare = nil
	}
}

func (n *node) parentSeq() (uint64, bool) {
	if n.parent == nil || n.parent.isRoot {
		return 0, false
	}
	return n.parent.seq, true
}

// chainSeq is the sequence hash of a child with local hash local under n.
func (n *node) chainSeq(local uint64) uint64 {
	if n.isRoot {
		return local
	}
	return blockid.Chain(n.seq, local)
}

// link makes c the first child of p.
func link(p, c *node) {
	c.parent = p
	c.next = p.child
	c.prev = nil
	if p.child != nil {
		p.child.prev = c
	}
	p.child = c
	p.nchildren++
	c.depth = p.depth + 1
}

// unlink detaches c from its parent's child list.
func unlink(c *node) {
	p := c.parent
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		p.child = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	p.nchildren--
}

func (n *node) pinned(now time.Duration) bool { return n.pinCount > 0 && now < n.r().pinExpiry }

func (n *node) prioritized(now time.Duration) bool {
	return n.priority > 0 && now < n.r().retainExpiry
}
