package cache

import (
	"slices"
)

// MarkTransient sets or clears the transient flag on the target pages (not
// their ancestors: a think span's prefix is ordinary). A transient page is
// never copied to a colder tier: eviction drops it instead.
func (ix *Index) MarkTransient(t Target, on bool) (Result, error) {
	nodes, unknown := ix.resolve(t)
	res := Result{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("mark transient", t, unknown)
	}
	for _, n := range ix.dedup(nodes) {
		if n.transient != on {
			ix.journalPage(n)
			n.transient = on
			res.Pages++
		}
	}
	ix.afterMutation()
	return res, nil
}

// PurgeResult reports pages removed on the index's own authority. The
// caller frees every slot in Freed.
type PurgeResult struct {
	// Removed counts pages removed from every tier.
	Removed int
	// Locked counts pages skipped because a running request holds them.
	Locked int
	// Pinned and Leased count pages skipped because a live pin or lease
	// protects them (prune and revoke override these; purge does not).
	Pinned int
	Leased int
	// Interior counts transient pages kept because they have children:
	// removing them needs a splice.
	Interior int
	// NotTransient counts targets that are not transient (purge only).
	NotTransient int
	// Kept counts pages kept because a descendant was skipped.
	Kept int
	// Unknown counts requested blocks that are not cached.
	Unknown int
	Freed   []Freed
}

// PurgeTransientLeaves frees, at once and from every tier, the target pages
// that are transient leaves, deepest first, so a transient tail (a think
// span still at the end of a sequence) goes entirely. Interior transient
// pages are counted, not removed; locked, pinned and leased ones are
// skipped and counted.
func (ix *Index) PurgeTransientLeaves(t Target) (PurgeResult, error) {
	nodes, unknown := ix.resolve(t)
	res := PurgeResult{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("purge transient", t, unknown)
	}
	now := ix.clock.Now()
	nodes = slices.Clone(ix.dedup(nodes))
	slices.SortStableFunc(nodes, func(a, b *node) int { return int(b.depth) - int(a.depth) })
	for _, n := range nodes {
		switch {
		case n.dead:
		case !n.transient:
			res.NotTransient++
		case n.nchildren > 0:
			res.Interior++
		case n.lockRef > 0:
			res.Locked++
		case n.pinned(now):
			res.Pinned++
		case n.r().leaseRefs > 0:
			res.Leased++
		default:
			res.Freed = ix.purgeEverywhere(n, res.Freed)
			res.Removed++
		}
	}
	ix.afterMutation()
	return res, nil
}
