package cache

// PruneDescendants evicts every descendant of each target page from every
// tier, at once, but not the page itself (the Prune directive, the
// router's evict_descendants). It overrides pins, retention and leases; locked
// pages are skipped and counted, and their ancestors below the target are
// kept (counted in Kept) so nothing is orphaned.
func (ix *Index) PruneDescendants(t Target) (PurgeResult, error) {
	nodes, unknown := ix.resolve(t)
	res := PurgeResult{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("prune descendants", t, unknown)
	}
	// Copy: pruning mutates the tree, and a later target may be a
	// descendant of an earlier one (then it is already gone).
	targets := append([]*node(nil), ix.dedup(nodes)...)
	for _, n := range targets {
		if n.dead {
			continue
		}
		for c := n.child; c != nil; {
			next := c.next
			ix.pruneSubtree(c, &res)
			c = next
		}
	}
	ix.afterMutation()
	return res, nil
}

// pruneSubtree removes n and its descendants, bottom-up, keeping locked
// pages and their ancestors. It reports whether n was removed.
func (ix *Index) pruneSubtree(n *node, res *PurgeResult) bool {
	all := true
	for c := n.child; c != nil; {
		next := c.next
		if !ix.pruneSubtree(c, res) {
			all = false
		}
		c = next
	}
	switch {
	case n.lockRef > 0:
		res.Locked++
		return false
	case !all:
		res.Kept++
		return false
	}
	res.Freed = ix.purgeEverywhere(n, res.Freed)
	res.Removed++
	return true
}
