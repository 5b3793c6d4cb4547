package cache

import (
	"cmp"
	"slices"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Only the disk tier's pages come back after a restart: the device and host
// tiers are memory (in connector mode both are shared memory the host
// owns). So a host that stops gracefully writes what it can of the pages
// held only there to the disk tier first, and a rolling restart finds its
// cache warm; PlanPersist plans those copies.

// PersistResult reports a PlanPersist.
type PersistResult struct {
	// Planned counts copies planned (pages and the ancestors they need).
	Planned int
	// Left counts pages held only in memory that are not planned: no room
	// on the tier, or a page or ancestor that cannot be copied now.
	Left int
}

// PlanPersist plans copies onto tier to of every page whose only copies
// are on hotter tiers, most recently used first, each after its missing
// ancestors (a page whose parent is not on the tier cannot be restored),
// while the tier stays within its high watermark, so that the eviction the
// next start runs does not undo them. Transient pages are never written
// colder. The mover runs the transitions like Plan's.
func (ix *Index) PlanPersist(to tier.Tier, dst []Transition) ([]Transition, PersistResult) {
	var res PersistResult
	if !to.Valid() || !ix.present(to) {
		return dst, res
	}
	var want []*node
	for _, ts := range ix.tenants {
		for _, n := range ts.bySeq {
			if !n.dead && !n.transient && !n.resident.Has(to) && !n.inbound.Has(to) && n.resident != 0 {
				if t, _ := n.resident.Hottest(); t.Colder(to) {
					continue // only on a colder tier (remote): it stays there
				}
				want = append(want, n)
			}
		}
	}
	// Most recent first; among equals, ancestors before descendants, and
	// then a stable order.
	slices.SortFunc(want, func(a, b *node) int {
		return cmp.Or(cmp.Compare(b.lastAccess, a.lastAccess), cmp.Compare(a.depth, b.depth),
			cmp.Compare(a.tenant.name, b.tenant.name), cmp.Compare(a.seq, b.seq))
	})
	room := int(ix.cfg.Tiers[to].High * float64(ix.cfg.Tiers[to].Capacity))
	for _, n := range want {
		if n.resident.Has(to) || n.inbound.Has(to) {
			continue // copied as an earlier page's ancestor
		}
		from, ok := copySource(n)
		if !ok || n.pending > 0 {
			res.Left++
			continue
		}
		before := len(dst)
		var planned bool
		if dst, planned = ix.planCopyChain(n, from, to, ReasonPersist, room, dst); !planned {
			res.Left++
			continue
		}
		res.Planned += len(dst) - before
	}
	ix.afterMutation()
	return dst, res
}
