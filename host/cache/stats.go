package cache

import (
	"math"

	"github.com/kvpilot/kvpilot/host/tier"
)

// TierStats describes one tier for the control plane and metrics.
type TierStats struct {
	Tier     tier.Tier
	Capacity int
	// Pages resident; Pinned and Leased count those of them with a pin
	// (lapsed or not, until swept) or a live lease.
	Pages  int
	Pinned int
	Leased int
	// PendingIn and PendingDrop count planned copies to and drops from
	// the tier that the mover has not reported yet.
	PendingIn   int
	PendingDrop int
	// Reserved counts slots handed out and not yet committed (Reserve).
	Reserved int
}

// Stats is a snapshot of the index.
type Stats struct {
	Tiers [tier.Count]TierStats
	// Pages counts pages in the index (each once, whatever its tiers).
	Pages int
	// PinnedPages counts distinct pinned pages; PinBudget is the most there
	// may be (the smallest tier budget), or -1 when unbounded.
	PinnedPages int
	PinBudget   int
	Tenants     int
	Leases      int
	InFlight    int
	// WriteThroughQueued counts device pages waiting for a write-through.
	WriteThroughQueued int
}

// Stats returns a snapshot. It costs O(pinned + leased pages + tenants).
func (ix *Index) Stats() Stats {
	s := Stats{PinnedPages: ix.pinnedPages, PinBudget: -1, Tenants: len(ix.tenants),
		Leases: len(ix.leases), InFlight: len(ix.inflight), WriteThroughQueued: len(ix.wtQueue)}
	if ix.pinBudget != math.MaxInt {
		s.PinBudget = ix.pinBudget
	}
	for _, t := range tier.All {
		s.Tiers[t] = TierStats{Tier: t, Capacity: ix.cfg.Tiers[t].Capacity, Pages: ix.resident[t],
			PendingIn: ix.pendingIn[t], PendingDrop: ix.pendingDrop[t], Reserved: ix.reserved[t]}
	}
	for _, ts := range ix.tenants {
		s.Pages += len(ts.bySeq)
	}
	for n := ix.pinnedHead; n != nil; n = n.r().pinNext {
		for _, t := range n.resident.Tiers() {
			s.Tiers[t].Pinned++
		}
	}
	epoch := ix.nextEpoch()
	for _, l := range ix.leaseOrder {
		for _, n := range l.pages {
			if n.dead || n.mark == epoch {
				continue
			}
			n.mark = epoch
			for _, t := range n.resident.Tiers() {
				s.Tiers[t].Leased++
			}
		}
	}
	return s
}
