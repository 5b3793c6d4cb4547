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
	c := &checker{ix: ix, leaseRefs: map[*node]uint32{}, degradedRefs: map[*node]uint32{},
		pendingOf: map[*node]uint32{}, droppingOf: map[*node]TierSet{}}
	c.leases()
	c.transitions()
	for name, ts := range ix.tenants {
		c.tenant(name, ts)
	}
	if c.resident != ix.resident {
		c.bad("resident counters %v, pages say %v", ix.resident, c.resident)
	}
	c.pinnedList()
	if noRare != (rare{}) {
		c.bad("the shared empty rare record was written: %+v", noRare)
	}
	return errors.Join(c.errs...)
}

// checker recounts what the index keeps counted: the first passes collect
// what leases and transitions say about each page, the tree walk compares
// every page with them, and the totals are compared at the end.
type checker struct {
	ix   *Index
	errs []error

	leaseRefs, degradedRefs map[*node]uint32 // by leases
	pendingOf               map[*node]uint32 // live transitions
	droppingOf              map[*node]TierSet

	resident [tier.Count]int // pages per tier, by the tree walk
	pinned   int
}

func (c *checker) bad(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// leases counts each page's lease references.
func (c *checker) leases() {
	ix := c.ix
	for _, l := range ix.leaseOrder {
		if ix.leases[l.id] != l {
			c.bad("lease %q in order but not in the map", l.id)
		}
		for _, n := range l.pages {
			if !n.dead {
				c.leaseRefs[n]++
				if l.degraded {
					c.degradedRefs[n]++
				}
			}
		}
	}
	if len(ix.leaseOrder) != len(ix.leases) {
		c.bad("%d leases in order, %d in the map", len(ix.leaseOrder), len(ix.leases))
	}
}

// transitions counts each page's live transitions and planned drops.
func (c *checker) transitions() {
	ix := c.ix
	var pendingIn, pendingDrop [tier.Count]int
	for id, p := range ix.inflight {
		if p.t.ID != id {
			c.bad("transition %d stored under %d", p.t.ID, id)
		}
		if !p.live {
			continue
		}
		if p.n.dead {
			c.bad("live transition %v on a removed page", p.t)
		}
		c.pendingOf[p.n]++
		if p.t.Kind == Copy {
			pendingIn[p.t.To]++
		} else {
			pendingDrop[p.t.From]++
			if c.droppingOf[p.n].Has(p.t.From) {
				c.bad("two live drops of page %d from %s", p.n.seq, p.t.From)
			}
			c.droppingOf[p.n] = c.droppingOf[p.n].with(p.t.From)
		}
	}
	if pendingIn != ix.pendingIn || pendingDrop != ix.pendingDrop {
		c.bad("pending counters in %v drop %v, transitions say in %v drop %v", ix.pendingIn, ix.pendingDrop, pendingIn, pendingDrop)
	}
}

// tenant walks one tenant's tree (iteratively: trees may be deep).
func (c *checker) tenant(name string, ts *tenantState) {
	if ts.name != name || ts.root.tenant != ts || !ts.root.isRoot || ts.root.resident != 0 {
		c.bad("tenant %q: bad root", name)
	}
	pinnedBefore, reached := c.pinned, 0
	stack := []*node{&ts.root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		reached += c.children(p, &stack)
		if !p.isRoot {
			c.page(name, ts, p)
		}
	}
	if reached != len(ts.bySeq) {
		c.bad("tenant %q: %d pages reachable, %d in the sequence map", name, reached, len(ts.bySeq))
	}
	if tenantPinned := c.pinned - pinnedBefore; tenantPinned != ts.pinned {
		c.bad("tenant %q: pinned counter %d, pages %d", name, ts.pinned, tenantPinned)
	}
	if ts.quota > 0 && ts.pinned > ts.quota {
		c.bad("tenant %q: %d pinned pages exceed quota %d", name, ts.pinned, ts.quota)
	}
}

// children checks p's child list and the counts p keeps of its children,
// pushes the children for the walk and returns how many there are.
func (c *checker) children(p *node, stack *[]*node) int {
	var childrenOn, childDrops [tier.Count]uint32
	var nchildren uint32
	for ch := p.child; ch != nil; ch = ch.next {
		nchildren++
		*stack = append(*stack, ch)
		for _, t := range tier.All {
			if ch.resident.Has(t) {
				childrenOn[t]++
			}
			if c.droppingOf[ch].Has(t) {
				childDrops[t]++
			}
		}
		if ch.parent != p {
			c.bad("page %d: parent pointer disagrees with the child list", ch.seq)
		}
		if ch.next != nil && ch.next.prev != ch {
			c.bad("page %d: broken sibling list", ch.seq)
		}
	}
	if nchildren != p.nchildren {
		c.bad("page %d: nchildren %d, list has %d", p.seq, p.nchildren, nchildren)
	}
	if !p.isRoot && childrenOn != p.childrenOn {
		c.bad("page %d: childrenOn %v, children say %v", p.seq, p.childrenOn, childrenOn)
	}
	if childDrops != p.childDrops {
		c.bad("page %d: childDrops %v, planned drops of its children say %v", p.seq, p.childDrops, childDrops)
	}
	return int(nchildren)
}

// page checks one page: its identity in the tree, its residency, then its
// counters.
func (c *checker) page(name string, ts *tenantState, n *node) {
	if ts.bySeq[n.seq] != n {
		c.bad("tenant %q page %d: not in the sequence map", name, n.seq)
	}
	if n.tenant != ts || n.dead {
		c.bad("page %d: wrong tenant or marked removed", n.seq)
	}
	if n.resident == 0 {
		c.bad("page %d: resident nowhere but still indexed", n.seq)
	}
	want := n.local
	if !n.parent.isRoot {
		want = blockid.Chain(n.parent.seq, n.local)
	}
	if n.seq != want {
		c.bad("page %d: sequence hash does not chain from parent and local %d", n.seq, n.local)
	}
	if n.depth != n.parent.depth+1 {
		c.bad("page %d: depth %d under parent depth %d", n.seq, n.depth, n.parent.depth)
	}
	for _, t := range tier.All {
		if n.resident.Has(t) {
			c.resident[t]++
			if !n.parent.isRoot && !n.parent.resident.Has(t) {
				c.bad("page %d is on %s but its parent %d is not", n.seq, t, n.parent.seq)
			}
		} else if n.loc[t] != 0 {
			c.bad("page %d: location %d kept on %s where it is not resident", n.seq, n.loc[t], t)
		}
	}
	c.pageCounters(n)
}

// pageCounters checks a page's locks, pins and references against what
// the leases and transitions say.
func (c *checker) pageCounters(n *node) {
	if !n.parent.isRoot && n.parent.lockRef < n.lockRef {
		c.bad("page %d: lock_ref %d above its parent's %d", n.seq, n.lockRef, n.parent.lockRef)
	}
	if n.pinCount > 0 {
		c.pinned++
		if n.r().pinExpiry <= 0 || n.r().pinTTL <= 0 {
			c.bad("page %d: pinned without ttl or expiry", n.seq)
		}
	} else if n.r().pinPrev != nil || n.r().pinNext != nil || n.r().pinExpiry != 0 {
		c.bad("page %d: unpinned but linked or with an expiry", n.seq)
	}
	const huge = 1 << 30 // an unsigned counter that went below zero
	if n.pinCount > huge || n.lockRef > huge || n.r().leaseRefs > huge || n.pending > huge {
		c.bad("page %d: counter underflow (pin %d, lock %d, lease %d, pending %d)",
			n.seq, n.pinCount, n.lockRef, n.r().leaseRefs, n.pending)
	}
	if n.priority > MaxPriority {
		c.bad("page %d: priority %d", n.seq, n.priority)
	}
	if n.r().leaseRefs != c.leaseRefs[n] {
		c.bad("page %d: leaseRefs %d, leases hold it %d times", n.seq, n.r().leaseRefs, c.leaseRefs[n])
	}
	if n.r().degradedRefs != c.degradedRefs[n] {
		c.bad("page %d: degradedRefs %d, degraded leases hold it %d times", n.seq, n.r().degradedRefs, c.degradedRefs[n])
	}
	if n.pending != c.pendingOf[n] {
		c.bad("page %d: pending %d, live transitions %d", n.seq, n.pending, c.pendingOf[n])
	}
	if n.dropping != c.droppingOf[n] {
		c.bad("page %d: dropping %v, live drops say %v", n.seq, n.dropping.Tiers(), c.droppingOf[n].Tiers())
	}
	if n.dropping&^n.resident != 0 {
		c.bad("page %d: a drop is planned from %v where it is not resident", n.seq, (n.dropping &^ n.resident).Tiers())
	}
}

// pinnedList checks the pinned list and the pin budgets.
func (c *checker) pinnedList() {
	ix := c.ix
	listed := 0
	for n := ix.pinnedHead; n != nil; n = n.r().pinNext {
		listed++
		if n.pinCount == 0 || n.dead {
			c.bad("page %d on the pinned list with count %d (removed %v)", n.seq, n.pinCount, n.dead)
		}
		if listed > c.pinned+1 {
			c.bad("pinned list longer than the pinned pages (cycle?)")
			break
		}
	}
	if listed != c.pinned || ix.pinnedPages != c.pinned {
		c.bad("pinned pages: counter %d, list %d, tree %d", ix.pinnedPages, listed, c.pinned)
	}
	if ix.pinnedPages > ix.pinBudget {
		c.bad("%d pinned pages exceed the pin budget %d", ix.pinnedPages, ix.pinBudget)
	}
	for _, t := range tier.All {
		if tc := ix.cfg.Tiers[t]; tc.Capacity > 0 && ix.pinnedPages > int(tc.PinFraction*float64(tc.Capacity)) {
			c.bad("%d pinned pages exceed tier %s budget", ix.pinnedPages, t)
		}
	}
}
