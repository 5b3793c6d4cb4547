package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/tier"
)

// SpliceCommit reports what ApplySplice or CommitSpliceRest changed.
type SpliceCommit struct {
	// Stored counts new pages that became device-resident (stored events).
	Stored int
	// Present counts new pages that were already on the device (another
	// request cached the edited sequence first); their slots are in Unused.
	Present int
	// Released counts old pages removed from the index.
	Released int
	// Freed lists the released pages' slots the caller frees. The device
	// slot of a page re-linked in place is not in it: the new page owns it.
	Freed []Freed
	// Unused lists device slots of the plan's pages that the index did not
	// take; the caller frees them.
	Unused []uint64
}

// ValidateSplice reports ErrSpliceStale unless every page the plan reads,
// re-links or releases is still where the plan found it, and the pages it
// releases are still unused by others. The caller checks this before it
// moves any byte: ApplySplice cannot undo a rotation.
func (ix *Index) ValidateSplice(p *SplicePlan) error {
	ts := ix.tenant(p.Tenant)
	stale := func(format string, args ...any) error {
		return fmt.Errorf("splice of tenant %q: %s: %w", p.Tenant, fmt.Sprintf(format, args...), ErrSpliceStale)
	}
	if ts == nil {
		if p.Keep > 0 || len(p.Release) > 0 || len(p.Runs) > 0 {
			return stale("the tenant has no pages")
		}
		return nil
	}
	if p.Keep > 0 {
		seq := p.Hashes.Sequence[p.Keep-1]
		if c := ts.bySeq[seq]; c == nil || (len(p.Pages) > 0 && !c.resident.Has(tier.Device)) {
			return stale("kept page %d is gone from the device", seq)
		}
	}
	now := ix.clock.Now()
	for _, seq := range p.Release {
		c := ts.bySeq[seq]
		switch {
		case c == nil:
			return stale("page %d is gone", seq)
		case c.lockRef > 0 || c.pinned(now) || c.r().leaseRefs > 0 || c.pending > 0:
			return stale("page %d is now in use", seq)
		}
	}
	onDevice := func(seq, loc uint64) error {
		c := ts.bySeq[seq]
		if c == nil || !c.resident.Has(tier.Device) || c.loc[tier.Device] != loc {
			return stale("page %d is no longer in device slot %d", seq, loc)
		}
		return nil
	}
	for i := range p.Pages {
		if pg := &p.Pages[i]; pg.InPlace {
			if err := onDevice(pg.From, pg.Loc); err != nil {
				return err
			}
		}
	}
	for _, r := range p.Runs {
		if err := onDevice(r.SrcSeq, r.SrcLoc); err != nil {
			return err
		}
	}
	return nil
}

// ApplySplice commits a plan whose bytes the caller has written: the new
// pages before FirstFill enter the index on the device tier (stored events;
// write-through queued), then the released old pages leave every tier
// (removed events). It validates first and changes nothing on
// ErrSpliceStale. The pages from FirstFill on are committed by
// CommitSpliceRest once the engine has filled them; until then their slots
// belong to the caller.
func (ix *Index) ApplySplice(p *SplicePlan) (SpliceCommit, error) {
	var res SpliceCommit
	if err := ix.ValidateSplice(p); err != nil {
		return res, err
	}
	defer ix.afterMutation()
	err := ix.insertSplicePages(p, 0, p.FirstFill, &res)
	// Released even when an insert failed: their bytes may already be
	// rotated, so they must not stay under their old hashes.
	inPlace := make(map[uint64]bool)
	for i := range p.Pages {
		if p.Pages[i].InPlace {
			inPlace[p.Pages[i].From] = true
		}
	}
	ts := ix.tenant(p.Tenant)
	for _, seq := range p.Release {
		c := ts.bySeq[seq]
		for _, t := range tier.All {
			if !c.resident.Has(t) {
				continue
			}
			if t != tier.Device || !inPlace[seq] {
				res.Freed = append(res.Freed, Freed{Tenant: ts.name, Seq: seq, Tier: t, Loc: c.loc[t]})
			}
			ix.removeResidency(c, t)
		}
		res.Released++
	}
	return res, err
}

// CommitSpliceRest commits the plan's pages from FirstFill on, once the
// engine has filled their replacement rows. Their parent (the page before
// them) must still be cached; the caller keeps it locked while the engine
// fills. On an error the pages not taken are in Unused.
func (ix *Index) CommitSpliceRest(p *SplicePlan) (SpliceCommit, error) {
	var res SpliceCommit
	defer ix.afterMutation()
	err := ix.insertSplicePages(p, p.FirstFill, len(p.Pages), &res)
	return res, err
}

// insertSplicePages inserts Pages[from:to] on the device tier under their
// parent, Commit's way: a page already on the device keeps its slot and
// the plan's goes to Unused.
func (ix *Index) insertSplicePages(p *SplicePlan, from, to int, res *SpliceCommit) error {
	if from >= to {
		return nil
	}
	unused := func(i int) {
		for ; i < to; i++ {
			res.Unused = append(res.Unused, p.Pages[i].Loc)
		}
	}
	ts := ix.tenantOrCreate(p.Tenant)
	parent := &ts.root
	if at := p.Keep + from; at > 0 {
		seq := p.Hashes.Sequence[at-1]
		parent = ts.bySeq[seq]
		if parent == nil || !parent.resident.Has(tier.Device) {
			unused(from)
			return fmt.Errorf("splice of tenant %q: page %d above the new pages is gone from the device: %w", p.Tenant, seq, ErrSpliceStale)
		}
	}
	now := ix.clock.Now()
	for i := from; i < to; i++ {
		pg := &p.Pages[i]
		c, err := ix.child(ts, parent, pg.Local, pg.Seq)
		if err != nil {
			unused(i)
			return fmt.Errorf("splice page %d: %w", p.Keep+i, err)
		}
		c.lastAccess = now
		if c.resident.Has(tier.Device) {
			res.Present++
			res.Unused = append(res.Unused, pg.Loc)
		} else {
			ix.addResidency(c, tier.Device, pg.Loc)
			ix.queueWriteThrough(c)
			res.Stored++
		}
		parent = c
	}
	return nil
}

// EndLease ends a lease without purging its pages: they become ordinary
// pages (evictable once nothing else holds them). Resume uses it after
// planning the load-back.
func (ix *Index) EndLease(id string) (LeaseInfo, error) {
	l, err := ix.liveLease("end", id)
	if err != nil {
		return LeaseInfo{}, err
	}
	info := l.info()
	ix.endLease(l)
	ix.afterMutation()
	return info, nil
}
