package cache

import "github.com/kvpilot/kvpilot/host/tier"

// Reset forgets every page, pin, lease and planned transition, and emits
// cleared for every present tier. The caller resets the pools. Transitions
// planned before the reset are unknown afterwards (the mover frees their
// destinations). It returns the number of pages forgotten.
func (ix *Index) Reset() int {
	pages := 0
	for _, ts := range ix.tenants {
		for _, n := range ts.bySeq {
			n.dead = true
			pages++
		}
	}
	ix.tenants = make(map[string]*tenantState)
	ix.resident = [tier.Count]int{}
	ix.pendingIn = [tier.Count]int{}
	ix.pendingDrop = [tier.Count]int{}
	ix.pinnedHead, ix.pinnedPages = nil, 0
	ix.leases = make(map[string]*lease)
	ix.leaseOrder = nil
	ix.inflight = make(map[uint64]*pending)
	ix.wtQueue = nil
	for _, t := range tier.All {
		if ix.present(t) {
			ev := Event{Kind: Cleared, Tier: t}
			if ix.cfg.OnEvent != nil {
				ix.cfg.OnEvent(ev)
			} else {
				ix.events = append(ix.events, ev)
			}
		}
	}
	ix.afterMutation()
	return pages
}
