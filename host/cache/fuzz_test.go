package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// opReader decodes fuzz input; past the end it yields zeros.
type opReader struct {
	data []byte
	pos  int
}

func (r *opReader) byte() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

func (r *opReader) intn(n int) int { return int(r.byte()) % n }
func (r *opReader) done() bool     { return r.pos >= len(r.data) }

var knownErrors = []error{
	ErrBadArgument, ErrUnknownBlock, ErrPinBudget, ErrTenantQuota, ErrBadTTL, ErrBadPriority,
	ErrLocked, ErrNotLocked, ErrPinned, ErrLeased, ErrUnknownLease, ErrLeaseExists,
	ErrHashCollision, ErrNotResident, ErrHasChildren, ErrTransient, ErrUnknownTransition,
	ErrTransitionCancelled, ErrTransitionOrder, ErrAlreadyResident, ErrCapacity,
}

type opDriver struct {
	t       testing.TB
	h       *harness
	r       *opReader
	tenants []string
	locks   []struct {
		tenant string
		seq    uint64
	}
	outstanding []Transition
	leases      []string
	log         []string
}

// prompt builds a prompt of 1..6 pages drawn from a 4-page alphabet, so
// prompts share prefixes and the tree branches.
func (d *opDriver) prompt() []uint32 {
	n := 1 + d.r.intn(6)
	var out []uint32
	for i := 0; i < n; i++ {
		out = append(out, tokens(d.r.intn(4)*100, testPage)...)
	}
	if d.r.intn(3) == 0 {
		out = append(out, 7) // a partial page, never cached
	}
	return out
}

// seq picks a sequence hash: usually a page of the tenant, sometimes junk.
func (d *opDriver) seq(tenant string) uint64 {
	if d.r.intn(8) == 0 {
		return uint64(d.r.byte()) + 1
	}
	hs := blockid.Compute(d.prompt(), testPage, blockid.Salt{Namespace: tenant})
	if len(hs.Sequence) == 0 {
		return 0
	}
	return hs.Sequence[len(hs.Sequence)-1]
}

func (d *opDriver) target() Target {
	tenant := d.tenants[d.r.intn(len(d.tenants))]
	switch d.r.intn(4) {
	case 0:
		return TargetTokens(tenant, blockid.Salt{Namespace: tenant}, d.prompt())
	case 1: // a local-hash path
		return TargetHashes(tenant, blockid.Compute(d.prompt(), testPage, blockid.Salt{Namespace: tenant}).Local...)
	default:
		hs := []uint64{d.seq(tenant)}
		if d.r.intn(2) == 0 {
			hs = append(hs, d.seq(tenant))
		}
		return TargetHashes(tenant, hs...)
	}
}

func (d *opDriver) expectKnown(op string, err error) {
	if err == nil {
		return
	}
	for _, k := range knownErrors {
		if errors.Is(err, k) {
			return
		}
	}
	d.t.Fatalf("%s returned an error wrapping no sentinel: %v\nops: %v", op, err, d.log)
}

func (d *opDriver) step() {
	ix, h := d.h.ix, d.h
	op := d.r.intn(23)
	d.log = append(d.log, fmt.Sprint(op))
	tenant := d.tenants[d.r.intn(len(d.tenants))]
	ttl := time.Duration(1+d.r.intn(60)) * time.Second
	switch op {
	case 0, 1: // commit
		toks := d.prompt()
		var m MatchResult
		ix.Match(tenant, blockid.Salt{Namespace: tenant}, toks, &m)
		locs := make([]uint64, len(m.Hashes.Local))
		for i := range locs {
			h.loc++
			locs[i] = h.loc
		}
		var res CommitResult
		d.expectKnown("commit", ix.Commit(tenant, m.Hashes, locs, &res))
		if res.Stored+res.Present != len(locs) {
			d.t.Fatalf("commit accounted %d+%d of %d pages", res.Stored, res.Present, len(locs))
		}
	case 2: // match
		var m MatchResult
		ix.Match(tenant, blockid.Salt{Namespace: tenant}, d.prompt(), &m)
		for i, p := range m.Pages {
			if p.Tiers == 0 {
				d.t.Fatalf("matched page %d resident nowhere", i)
			}
		}
	case 3:
		_, err := ix.Pin(d.target(), ttl)
		d.expectKnown("pin", err)
	case 4:
		_, err := ix.Unpin(d.target())
		d.expectKnown("unpin", err)
	case 5:
		s := d.seq(tenant)
		if _, err := ix.Lock(tenant, s); err == nil {
			d.locks = append(d.locks, struct {
				tenant string
				seq    uint64
			}{tenant, s})
		} else {
			d.expectKnown("lock", err)
		}
	case 6:
		if len(d.locks) > 0 {
			i := d.r.intn(len(d.locks))
			l := d.locks[i]
			if _, err := ix.Unlock(l.tenant, l.seq); err != nil {
				d.t.Fatalf("unlock of a held lock failed: %v", err)
			}
			d.locks = append(d.locks[:i], d.locks[i+1:]...)
		}
	case 7:
		_, err := ix.Retain(d.target(), d.r.intn(102), ttl)
		d.expectKnown("retain", err)
	case 8:
		_, err := ix.MarkTransient(d.target(), d.r.intn(2) == 0)
		d.expectKnown("transient", err)
	case 9:
		_, err := ix.PurgeTransientLeaves(d.target())
		d.expectKnown("purge", err)
	case 10:
		_, err := ix.PruneDescendants(d.target())
		d.expectKnown("prune", err)
	case 11:
		pt := []tier.Tier{tier.Host, tier.Disk, tier.Device}[d.r.intn(3)]
		li, _, err := ix.Pause(d.target(), "", pt, ttl)
		d.expectKnown("pause", err)
		if err == nil {
			d.leases = append(d.leases, li.ID)
		}
	case 12:
		if len(d.leases) > 0 {
			_, err := ix.RenewLease(d.leases[d.r.intn(len(d.leases))], ttl)
			d.expectKnown("renew", err)
		}
	case 13:
		if len(d.leases) > 0 {
			_, err := ix.RevokeLease(d.leases[d.r.intn(len(d.leases))])
			d.expectKnown("revoke", err)
		}
	case 14:
		h.clock.Advance(time.Duration(d.r.intn(40)) * time.Second)
	case 15:
		ix.Sweep(h.clock.Now())
	case 16, 17: // plan
		now := h.clock.Now()
		ts := ix.Plan(now, nil)
		d.checkPlan(ts, now)
		d.outstanding = append(d.outstanding, ts...)
	case 18, 19: // complete one, usually in order
		if len(d.outstanding) == 0 {
			return
		}
		i := 0
		if d.r.intn(4) == 0 {
			i = d.r.intn(len(d.outstanding))
		}
		tr := d.outstanding[i]
		var err error
		if tr.Kind == Copy {
			h.loc++
			err = ix.CompleteCopy(tr, h.loc)
		} else {
			err = ix.CompleteDrop(tr)
		}
		d.expectKnown("complete", err)
		if !errors.Is(err, ErrTransitionOrder) {
			d.outstanding = append(d.outstanding[:i], d.outstanding[i+1:]...)
		}
	case 20:
		if len(d.outstanding) == 0 {
			return
		}
		if d.r.intn(4) == 0 { // the last few at once, as a cancelled batch fails
			i := max(0, len(d.outstanding)-1-d.r.intn(8))
			for _, err := range ix.FailTransitions(d.outstanding[i:]) {
				d.expectKnown("fail several", err)
			}
			d.outstanding = d.outstanding[:i]
			return
		}
		i := d.r.intn(len(d.outstanding))
		d.expectKnown("fail", ix.FailTransition(d.outstanding[i]))
		d.outstanding = append(d.outstanding[:i], d.outstanding[i+1:]...)
	case 21:
		to := []tier.Tier{tier.Device, tier.Host, tier.Disk}[d.r.intn(3)]
		ts, _, err := ix.PlanFetch(d.target(), to, nil)
		d.expectKnown("fetch", err)
		d.checkPlan(ts, h.clock.Now())
		d.outstanding = append(d.outstanding, ts...)
		if d.r.intn(16) == 0 {
			ix.Reset()
			d.locks, d.leases = nil, nil
		}
	case 22: // a store found a copy corrupt
		d.loseCopy(tenant, d.seq(tenant), tier.Tier(d.r.intn(tier.Count)))
	}
}

// loseCopy runs LoseCopy and checks what it promises: the copy and every
// descendant's copy on t are gone, each freed slot is on t, and pages
// resident nowhere else left the index.
func (d *opDriver) loseCopy(tenant string, seq uint64, t tier.Tier) {
	ix := d.h.ix
	before, ok := ix.Lookup(tenant, seq)
	d.h.ix.DrainEvents(nil)
	res, err := ix.LoseCopy(tenant, seq, t)
	d.expectKnown("lose copy", err)
	if err != nil {
		if ok && before.Tiers.Has(t) {
			d.t.Fatalf("lose copy of a page on %s failed: %v", t, err)
		}
		if len(res.Freed) != 0 {
			d.t.Fatalf("a failed lose copy freed %v", res.Freed)
		}
		return
	}
	if !ok || !before.Tiers.Has(t) {
		d.t.Fatalf("lose copy of a page not on %s succeeded: %+v", t, before)
	}
	if res.Copies != len(res.Freed) || res.Copies < 1 || res.Removed > res.Copies || res.Lost > res.Removed ||
		max(res.Pinned, res.Leased, res.Locked) > res.Lost {
		d.t.Fatalf("lose copy result %+v", res)
	}
	removedEvents := 0
	for _, e := range ix.DrainEvents(nil) {
		if e.Kind != Removed || e.Tier != t {
			d.t.Fatalf("lose copy emitted %+v", e)
		}
		removedEvents++
	}
	if removedEvents != res.Copies {
		d.t.Fatalf("%d removed events for %d lost copies", removedEvents, res.Copies)
	}
	gone := 0
	for _, f := range res.Freed {
		if f.Tier != t || f.Tenant != tenant {
			d.t.Fatalf("lose copy on %s freed %+v", t, f)
		}
		pi, ok := ix.Lookup(f.Tenant, f.Seq)
		switch {
		case !ok:
			gone++
		case pi.Tiers.Has(t):
			d.t.Fatalf("page %d still on %s after losing its copy", f.Seq, t)
		}
	}
	if gone != res.Removed {
		d.t.Fatalf("%d freed pages left the index, result says %d", gone, res.Removed)
	}
	if pi, ok := ix.Lookup(tenant, seq); ok && pi.Tiers.Has(t) {
		d.t.Fatalf("lost copy still listed: %+v", pi)
	}
	// Locks on removed pages went with them.
	kept := d.locks[:0]
	for _, l := range d.locks {
		if ix.Contains(l.tenant, l.seq) {
			kept = append(kept, l)
		}
	}
	d.locks = kept
}

// checkPlan asserts the planner's promises on each planned transition.
func (d *opDriver) checkPlan(ts []Transition, now time.Duration) {
	for _, tr := range ts {
		pi, ok := d.h.ix.Lookup(tr.Tenant, tr.Seq)
		if !ok {
			d.t.Fatalf("planned %v for a page not in the index", tr)
		}
		if !pi.Tiers.Has(tr.From) || pi.Loc[tr.From] != tr.FromLoc {
			d.t.Fatalf("planned %v from a tier the page is not on: %+v", tr, pi)
		}
		switch tr.Kind {
		case Drop:
			if pi.LockRef > 0 {
				d.t.Fatalf("planned %v for a locked page", tr)
			}
			last := pi.Tiers == TierSet(0).with(tr.From)
			if last && tr.After == 0 && pi.PinCount > 0 && now < pi.PinExpiry {
				d.t.Fatalf("planned a drop of a pinned page's last copy: %v %+v", tr, pi)
			}
			if last && tr.After == 0 && pi.Leases > 0 {
				d.t.Fatalf("planned a drop of a leased page's last copy: %v %+v", tr, pi)
			}
		case Copy:
			if pi.Transient && tr.To.Colder(tr.From) {
				d.t.Fatalf("planned %v for a transient page", tr)
			}
		}
	}
}

func (d *opDriver) checkAfterStep() {
	if err := d.h.ix.Check(); err != nil {
		d.t.Fatalf("invariants after ops %v: %v", d.log, err)
	}
	for _, l := range d.locks {
		if !d.h.ix.Contains(l.tenant, l.seq) {
			d.t.Fatalf("locked page %d of %q left the index; ops %v", l.seq, l.tenant, d.log)
		}
	}
}

func runOps(t testing.TB, data []byte) {
	r := &opReader{data: data}
	cfgByte := r.byte()
	h := newHarness(t, func(c *Config) {
		c.DeviceWrite = WritePolicy(cfgByte % 3)
		c.Tiers[tier.Device] = TierConfig{Capacity: 8, High: 0.75, Low: 0.5, PinFraction: 0.5}
		c.Tiers[tier.Host] = TierConfig{Capacity: 12, High: 0.75, Low: 0.5, PinFraction: 0.75}
		c.Tiers[tier.Disk] = TierConfig{Capacity: 24, High: 0.9, Low: 0.5, PinFraction: 0.5}
		if cfgByte&4 != 0 {
			c.Tiers[tier.Host] = TierConfig{} // no host tier
		}
		if cfgByte&8 != 0 {
			c.TenantPinQuota = 3
		}
	})
	d := &opDriver{t: t, h: h, r: r, tenants: []string{"a", "b"}}
	for steps := 0; !r.done() && steps < 2000; steps++ {
		d.step()
		d.checkAfterStep()
	}
	// Drain: completing everything, again while it makes progress (a drop
	// may wait for a later copy or for its children's drops), must leave a
	// consistent index with nothing in flight.
	for len(d.outstanding) > 0 {
		left := d.outstanding[:0]
		for _, tr := range d.outstanding {
			var err error
			if tr.Kind == Copy {
				h.loc++
				err = h.ix.CompleteCopy(tr, h.loc)
			} else {
				err = h.ix.CompleteDrop(tr)
			}
			d.expectKnown("drain", err)
			if errors.Is(err, ErrTransitionOrder) {
				left = append(left, tr)
			}
		}
		if len(left) == len(d.outstanding) {
			t.Fatalf("drain stuck: %d transitions wait on each other: %v\nops: %v", len(left), left, d.log)
		}
		d.outstanding = left
	}
	if n := h.ix.InFlight(); n != 0 {
		t.Fatalf("%d transitions in flight after the drain; ops: %v", n, d.log)
	}
	d.checkAfterStep()
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 0, 1, 16, 0, 18, 0})
	f.Add([]byte{1, 3, 0, 5, 0, 1, 2, 16, 18, 18, 18, 14, 30, 16, 18, 18})
	f.Add([]byte{2, 0, 0, 3, 0, 0, 0, 11, 1, 2, 0, 16, 18, 18, 18, 13, 0})
	f.Fuzz(func(t *testing.T, data []byte) { runOps(t, data) })
}

// TestRandomOps is the property test: many random operation sequences,
// each checked after every step.
func TestRandomOps(t *testing.T) {
	runs, steps := 300, 400
	if testing.Short() || invariantsOn {
		runs = 60
	}
	for seed := 0; seed < runs; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		data := make([]byte, steps*4)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runOps(t, data) })
	}
}
