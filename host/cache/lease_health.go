package cache

import (
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// A lease whose pages cannot reach the pause tier (copies fail, or the tier
// has no room that eviction can make) must not hold the hotter tiers
// hostage: an operator saw a full disk tier keep 112 leased pages on the
// device, refusing the engine, and a mover retrying 190 times a second.
// Each failed attempt sets the lease back: Plan leaves it alone for an
// exponentially growing wait (leaseRetryBase doubling, at most
// leaseRetryMax) on the index's clock. After leaseDegradeAfter attempts in
// a row the lease is degraded: it stays recorded and keeps trying at the
// capped wait, but its pages are ordinary evictable pages until it
// settles, and Stats reports it with the reason.
const (
	leaseRetryBase    = 100 * time.Millisecond
	leaseRetryMax     = 10 * time.Second
	leaseDegradeAfter = 3
)

// leaseHeld reports whether a healthy lease holds n, which keeps its last
// copy and makes it unevictable.
func (n *node) leaseHeld() bool { return n.r().leaseRefs > n.r().degradedRefs }

// leaseSetback records a failed attempt to settle l: it backs off, and
// degrades once it failed leaseDegradeAfter times in a row.
func (ix *Index) leaseSetback(l *lease, now time.Duration, reason string) {
	l.failures++
	wait := leaseRetryBase << min(l.failures-1, 16)
	l.retryAt = now + min(wait, leaseRetryMax)
	l.reason = reason
	if l.failures >= leaseDegradeAfter && !l.degraded {
		l.degraded = true
		for _, n := range l.pages {
			if !n.dead {
				n.w().degradedRefs++
			}
		}
	}
}

// leaseHealthy clears l's failures once it settled: its pages are held
// again.
func (ix *Index) leaseHealthy(l *lease) {
	l.failures, l.retryAt, l.reason = 0, 0, ""
	ix.undegrade(l)
}

func (ix *Index) undegrade(l *lease) {
	if !l.degraded {
		return
	}
	l.degraded = false
	for _, n := range l.pages {
		if !n.dead {
			n.w().degradedRefs--
		}
	}
}

// failedPauseCopy sets back the lease a failed pause copy of n worked for.
func (ix *Index) failedPauseCopy(n *node, to tier.Tier) {
	for _, l := range ix.leaseOrder {
		if l.tier != to || l.settled {
			continue
		}
		for _, m := range l.pages {
			if m == n {
				ix.leaseSetback(l, ix.clock.Now(), fmt.Sprintf("copies to %s failed", to))
				return
			}
		}
	}
}

// PauseRoom checks that the pause tier can take the target's pages that are
// not on it yet, counting claimed pages earlier pauses of the same turn
// will bring there: what is free plus what its eviction rules may take
// (pages not pinned, locked, leased or moving). It returns the pages the
// pause needs there; a pause that cannot fit is refused whole with
// ErrCapacity, naming the tier, so no lease is granted that can only fail in
// the background.
func (ix *Index) PauseRoom(t Target, pauseTier tier.Tier, claimed int) (int, error) {
	if !pauseTier.Valid() || !ix.present(pauseTier) {
		return 0, fmt.Errorf("pause %s: pause tier %s has no capacity: %w", t, pauseTier, ErrBadArgument)
	}
	nodes, _ := ix.resolve(t)
	need := 0
	for _, n := range ix.closureOf(nodes) {
		if !n.dead && !n.transient && !n.resident.Has(pauseTier) && !n.inbound.Has(pauseTier) {
			need++
		}
	}
	capacity := ix.cfg.Tiers[pauseTier].Capacity
	free := capacity - ix.used(pauseTier) - claimed
	if need <= free {
		return need, nil
	}
	// The pause's own pages (marked by closureOf) are not room for it.
	epoch, now := ix.epoch, ix.clock.Now()
	room := 0
	for _, ts := range ix.tenants {
		for _, n := range ts.bySeq {
			if n.mark != epoch && evictable(n, pauseTier, now) {
				room++
			}
		}
	}
	if need <= free+room {
		return need, nil
	}
	return need, fmt.Errorf("pause %s: tier %s has room for %d of the %d pages it needs (capacity %d, %d in use or under way, %d evictable): %w",
		t, pauseTier, max(free+room, 0), need, capacity, ix.used(pauseTier)+claimed, room, ErrCapacity)
}

// DegradedLease is a lease whose pages could not be moved to its pause
// tier: its pages are evictable until it settles.
type DegradedLease struct {
	ID     string
	Tenant string
	Reason string
}

// DegradedLeases lists degraded leases in creation order.
func (ix *Index) DegradedLeases() []DegradedLease {
	var out []DegradedLease
	for _, l := range ix.leaseOrder {
		if l.degraded {
			out = append(out, DegradedLease{ID: l.id, Tenant: l.tenant, Reason: l.reason})
		}
	}
	return out
}
