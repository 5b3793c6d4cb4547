package cache

import "time"

// PinRecord is one page's own pin state, for persisting pins across a host
// restart: re-pinning Seq Count times with TTL and the remaining time
// restores the pin and its ancestors' counts.
type PinRecord struct {
	Tenant string
	Seq    uint64
	// Count is the pin references held on this page beyond those its
	// pinned descendants hold for it (ancestors are pinned by Pin itself).
	Count  int
	TTL    time.Duration
	Expiry time.Duration
}

// Pins lists the live pins as records whose replay through Pin rebuilds
// the same pin counts: a page's own references are its count minus the
// counts of its pinned children, since pinning a page pins its ancestors.
// Lapsed pins are left out.
func (ix *Index) Pins(now time.Duration) []PinRecord {
	var out []PinRecord
	for n := ix.pinnedHead; n != nil; n = n.r().pinNext {
		if now >= n.r().pinExpiry {
			continue
		}
		own := int(n.pinCount)
		for c := n.child; c != nil; c = c.next {
			own -= int(c.pinCount) // every reference on a child is also on n
		}
		if own > 0 {
			out = append(out, PinRecord{Tenant: n.tenant.name, Seq: n.seq, Count: own, TTL: n.r().pinTTL, Expiry: n.r().pinExpiry})
		}
	}
	return out
}

// PinCount counts the live pins of tenant's namespace (all: of every
// tenant) as Pins records them: a pinned path counts once per Pin.
func (ix *Index) PinCount(tenant string, all bool) int {
	ns := ix.Namespace(tenant)
	n := 0
	for _, p := range ix.Pins(ix.clock.Now()) {
		if all || p.Tenant == ns {
			n += p.Count
		}
	}
	return n
}

// RestorePin re-applies a persisted PinRecord: Count pins on the page (and
// so its ancestors) expiring at expiry, refreshed by ttl on later hits. It
// is subject to the same budgets as Pin and fails whole the same way.
func (ix *Index) RestorePin(t Target, count int, ttl, expiry time.Duration) error {
	now := ix.clock.Now()
	if count <= 0 || expiry <= now {
		return nil
	}
	ix.BeginJournal()
	for i := 0; i < count; i++ {
		if _, err := ix.Pin(t, expiry-now); err != nil {
			ix.RollbackJournal()
			return err
		}
	}
	nodes, _ := ix.resolve(t)
	for _, n := range ix.closureOf(nodes) {
		n.w().pinTTL = max(n.r().pinTTL, ttl)
	}
	ix.CommitJournal()
	ix.afterMutation()
	return nil
}
