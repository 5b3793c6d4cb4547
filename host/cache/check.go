package cache

import (
	"errors"
	"fmt"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Check verifies every structural invariant of the index and returns the
// violations found (nil when consistent). It walks the whole index, so it
// is for tests, fuzzing and the `invariants` build, not the hot path.
func (ix *Index) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	var resident [tier.Count]int
	pinned := 0
	leaseRefs, degradedRefs := map[*node]uint32{}, map[*node]uint32{}
	for _, l := range ix.leaseOrder {
		if ix.leases[l.id] != l {
			bad("lease %q in order but not in the map", l.id)
		}
		for _, n := range l.pages {
			if !n.dead {
				leaseRefs[n]++
				if l.degraded {
					degradedRefs[n]++
				}
			}
		}
	}
	if len(ix.leaseOrder) != len(ix.leases) {
		bad("%d leases in order, %d in the map", len(ix.leaseOrder), len(ix.leases))
	}
	pendingOf := map[*node]uint32{}
	droppingOf := map[*node]TierSet{}
	var pendingIn, pendingDrop [tier.Count]int
	for id, p := range ix.inflight {
		if p.t.ID != id {
			bad("transition %d stored under %d", p.t.ID, id)
		}
		if !p.live {
			continue
		}
		if p.n.dead {
			bad("live transition %v on a removed page", p.t)
		}
		pendingOf[p.n]++
		if p.t.Kind == Copy {
			pendingIn[p.t.To]++
		} else {
			pendingDrop[p.t.From]++
			if droppingOf[p.n].Has(p.t.From) {
				bad("two live drops of page %d from %s", p.n.seq, p.t.From)
			}
			droppingOf[p.n] = droppingOf[p.n].with(p.t.From)
		}
	}
	if pendingIn != ix.pendingIn || pendingDrop != ix.pendingDrop {
		bad("pending counters in %v drop %v, transitions say in %v drop %v", ix.pendingIn, ix.pendingDrop, pendingIn, pendingDrop)
	}
	for name, ts := range ix.tenants {
		if ts.name != name || ts.root.tenant != ts || !ts.root.isRoot || ts.root.resident != 0 {
			bad("tenant %q: bad root", name)
		}
		tenantPinned := 0
		reached := 0
		// Walk the tree iteratively (trees may be deep).
		stack := []*node{&ts.root}
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			var childrenOn, childDrops [tier.Count]uint32
			var nchildren uint32
			for c := p.child; c != nil; c = c.next {
				nchildren++
				reached++
				stack = append(stack, c)
				for _, t := range tier.All {
					if c.resident.Has(t) {
						childrenOn[t]++
					}
					if droppingOf[c].Has(t) {
						childDrops[t]++
					}
				}
				if c.parent != p {
					bad("page %d: parent pointer disagrees with the child list", c.seq)
				}
				if c.next != nil && c.next.prev != c {
					bad("page %d: broken sibling list", c.seq)
				}
			}
			if nchildren != p.nchildren {
				bad("page %d: nchildren %d, list has %d", p.seq, p.nchildren, nchildren)
			}
			if !p.isRoot && childrenOn != p.childrenOn {
				bad("page %d: childrenOn %v, children say %v", p.seq, p.childrenOn, childrenOn)
			}
			if childDrops != p.childDrops {
				bad("page %d: childDrops %v, planned drops of its children say %v", p.seq, p.childDrops, childDrops)
			}
			if p.isRoot {
				continue
			}
			n := p
			if ts.bySeq[n.seq] != n {
				bad("tenant %q page %d: not in the sequence map", name, n.seq)
			}
			if n.tenant != ts || n.dead {
				bad("page %d: wrong tenant or marked removed", n.seq)
			}
			if n.resident == 0 {
				bad("page %d: resident nowhere but still indexed", n.seq)
			}
			want := n.local
			if !n.parent.isRoot {
				want = blockid.Chain(n.parent.seq, n.local)
			}
			if n.seq != want {
				bad("page %d: sequence hash does not chain from parent and local %d", n.seq, n.local)
			}
			if n.depth != n.parent.depth+1 {
				bad("page %d: depth %d under parent depth %d", n.seq, n.depth, n.parent.depth)
			}
			for _, t := range tier.All {
				if n.resident.Has(t) {
					resident[t]++
					if !n.parent.isRoot && !n.parent.resident.Has(t) {
						bad("page %d is on %s but its parent %d is not", n.seq, t, n.parent.seq)
					}
				} else if n.loc[t] != 0 {
					bad("page %d: location %d kept on %s where it is not resident", n.seq, n.loc[t], t)
				}
			}
			if !n.parent.isRoot && n.parent.lockRef < n.lockRef {
				bad("page %d: lock_ref %d above its parent's %d", n.seq, n.lockRef, n.parent.lockRef)
			}
			if n.pinCount > 0 {
				pinned++
				tenantPinned++
				if n.pinExpiry <= 0 || n.pinTTL <= 0 {
					bad("page %d: pinned without ttl or expiry", n.seq)
				}
			} else if n.pinPrev != nil || n.pinNext != nil || n.pinExpiry != 0 {
				bad("page %d: unpinned but linked or with an expiry", n.seq)
			}
			const huge = 1 << 30 // an unsigned counter that went below zero
			if n.pinCount > huge || n.lockRef > huge || n.leaseRefs > huge || n.pending > huge {
				bad("page %d: counter underflow (pin %d, lock %d, lease %d, pending %d)",
					n.seq, n.pinCount, n.lockRef, n.leaseRefs, n.pending)
			}
			if n.priority > MaxPriority {
				bad("page %d: priority %d", n.seq, n.priority)
			}
			if n.leaseRefs != leaseRefs[n] {
				bad("page %d: leaseRefs %d, leases hold it %d times", n.seq, n.leaseRefs, leaseRefs[n])
			}
			if n.degradedRefs != degradedRefs[n] {
				bad("page %d: degradedRefs %d, degraded leases hold it %d times", n.seq, n.degradedRefs, degradedRefs[n])
			}
			if n.pending != pendingOf[n] {
				bad("page %d: pending %d, live transitions %d", n.seq, n.pending, pendingOf[n])
			}
			if n.dropping != droppingOf[n] {
				bad("page %d: dropping %v, live drops say %v", n.seq, n.dropping.Tiers(), droppingOf[n].Tiers())
			}
			if n.dropping&^n.resident != 0 {
				bad("page %d: a drop is planned from %v where it is not resident", n.seq, (n.dropping &^ n.resident).Tiers())
			}
		}
		if reached != len(ts.bySeq) {
			bad("tenant %q: %d pages reachable, %d in the sequence map", name, reached, len(ts.bySeq))
		}
		if tenantPinned != ts.pinned {
			bad("tenant %q: pinned counter %d, pages %d", name, ts.pinned, tenantPinned)
		}
		if ts.quota > 0 && ts.pinned > ts.quota {
			bad("tenant %q: %d pinned pages exceed quota %d", name, ts.pinned, ts.quota)
		}
	}
	if resident != ix.resident {
		bad("resident counters %v, pages say %v", ix.resident, resident)
	}
	listed := 0
	for n := ix.pinnedHead; n != nil; n = n.pinNext {
		listed++
		if n.pinCount == 0 || n.dead {
			bad("page %d on the pinned list with count %d (removed %v)", n.seq, n.pinCount, n.dead)
		}
		if listed > pinned+1 {
			bad("pinned list longer than the pinned pages (cycle?)")
			break
		}
	}
	if listed != pinned || ix.pinnedPages != pinned {
		bad("pinned pages: counter %d, list %d, tree %d", ix.pinnedPages, listed, pinned)
	}
	if ix.pinnedPages > ix.pinBudget {
		bad("%d pinned pages exceed the pin budget %d", ix.pinnedPages, ix.pinBudget)
	}
	for _, t := range tier.All {
		if tc := ix.cfg.Tiers[t]; tc.Capacity > 0 && ix.pinnedPages > int(tc.PinFraction*float64(tc.Capacity)) {
			bad("%d pinned pages exceed tier %s budget", ix.pinnedPages, t)
		}
	}
	return errors.Join(errs...)
}
