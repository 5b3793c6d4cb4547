package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// CommitResult receives a commit. Reuse one across calls.
type CommitResult struct {
	// Stored counts pages that became resident on the device tier.
	Stored int
	// Present counts pages that were already there; the index keeps their
	// existing location.
	Present int
	// Unused lists the locations the caller offered that the index did not
	// take (duplicates, or pages after an error): the caller frees them.
	Unused []uint64
}

// Commit records that the engine wrote the pages named by h (consecutive
// full pages from the tenant root, as Match returns in MatchResult.Hashes)
// into device slots locs[i]. New pages are inserted; each page that becomes
// device-resident emits stored(device). Pages already on the device keep
// their location and locs[i] is returned in res.Unused.
//
// On an error (bad lengths, a sequence hash that does not chain, a hash
// collision) the pages before the bad one stay committed and the rest of
// locs is returned in res.Unused.
func (ix *Index) Commit(tenant string, h blockid.Hashes, locs []uint64, res *CommitResult) error {
	return ix.CommitFrom(tenant, h, 0, locs, res)
}

// CommitFrom is Commit for pages [first, len(h.Sequence)) of h, written
// into locs (one per page from first on). Pages [0, first) must already be
// on the device: they are what the engine committed or matched before (a
// prompt saved in several commits), named by hash alone. When one of them
// is not (removed, or moved to a colder tier: a page on the device needs
// its parent there), nothing is committed and the error wraps
// ErrNotResident.
func (ix *Index) CommitFrom(tenant string, h blockid.Hashes, first int, locs []uint64, res *CommitResult) error {
	res.Stored, res.Present = 0, 0
	res.Unused = res.Unused[:0]
	n := len(h.Sequence)
	if len(h.Local) != n || first < 0 || first > n || len(locs) != n-first {
		res.Unused = append(res.Unused, locs...)
		return fmt.Errorf("commit: %d local hashes, %d sequence hashes, first page %d and %d locations must agree: %w",
			len(h.Local), n, first, len(locs), ErrBadArgument)
	}
	if len(locs) == 0 {
		return nil
	}
	ts := ix.tenantOrCreate(tenant)
	now := ix.clock.Now()
	parent := &ts.root
	defer ix.afterMutation()
	for i := range first {
		c := ts.bySeq[h.Sequence[i]]
		if c == nil || c.parent != parent || c.local != h.Local[i] || !c.resident.Has(tier.Device) {
			res.Unused = append(res.Unused, locs...)
			return fmt.Errorf("commit pages %d-%d: page %d before them is no longer on the device: %w", first, n-1, i, ErrNotResident)
		}
		parent = c
	}
	for i, seq := range h.Sequence[first:] {
		c, err := ix.child(ts, parent, h.Local[first+i], seq)
		if err != nil {
			res.Unused = append(res.Unused, locs[i:]...)
			return fmt.Errorf("commit page %d of %d: %w", first+i, n, err)
		}
		c.lastAccess = now
		if c.resident.Has(tier.Device) {
			res.Present++
			res.Unused = append(res.Unused, locs[i])
		} else {
			ix.addResidency(c, tier.Device, locs[i])
			ix.queueWriteThrough(c)
			res.Stored++
		}
		parent = c
	}
	return nil
}

// child finds or creates parent's child with the given hashes, checking
// that seq chains from the parent and does not collide with another page.
// A created child is resident nowhere yet: the caller adds residency at
// once.
func (ix *Index) child(ts *tenantState, parent *node, local, seq uint64) (*node, error) {
	c := ts.bySeq[seq]
	if c != nil {
		if c.parent != parent || c.local != local {
			return nil, fmt.Errorf("sequence hash %d (local %d) is already page %d under another parent: %w",
				seq, local, c.local, ErrHashCollision)
		}
		return c, nil
	}
	if want := parent.chainSeq(local); want != seq {
		return nil, fmt.Errorf("sequence hash %d does not chain from its parent and local hash %d (want %d): %w",
			seq, local, want, ErrBadArgument)
	}
	return ix.newNode(ts, parent, local, seq), nil
}

// Insert records one page that is resident on tier t at loc, under the
// page with sequence hash parent (or at the tenant root when hasParent is
// false). The parent must already be resident on t. It is how a rebuilt
// disk index or a remote listing enters the index; the engine path is
// Commit. stored is false when the page was already on t (loc is then
// unused and the caller frees it).
func (ix *Index) Insert(tenant string, parent uint64, hasParent bool, local uint64, t tier.Tier, loc uint64) (seq uint64, stored bool, err error) {
	if !t.Valid() {
		return 0, false, fmt.Errorf("insert: tier %d: %w", t, ErrBadArgument)
	}
	ts := ix.tenantOrCreate(tenant)
	p := &ts.root
	if hasParent {
		p = ts.bySeq[parent]
		if p == nil {
			return 0, false, fmt.Errorf("insert under parent %d: %w", parent, ErrUnknownBlock)
		}
		if !p.resident.Has(t) {
			return 0, false, fmt.Errorf("insert on %s under parent %d that is not there: %w", t, parent, ErrNotResident)
		}
	}
	seq = p.chainSeq(local)
	defer ix.afterMutation()
	c, err := ix.child(ts, p, local, seq)
	if err != nil {
		return 0, false, fmt.Errorf("insert: %w", err)
	}
	c.lastAccess = ix.clock.Now()
	if c.resident.Has(t) {
		return seq, false, nil
	}
	ix.addResidency(c, t, loc)
	if t == tier.Device {
		ix.queueWriteThrough(c)
	}
	return seq, true, nil
}

func (ix *Index) queueWriteThrough(n *node) {
	if ix.cfg.DeviceWrite == WriteThrough && ix.present(tier.Host) && !n.transient && !n.resident.Has(tier.Host) {
		ix.wtQueue = append(ix.wtQueue, n)
	}
}
