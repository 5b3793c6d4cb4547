package cache

import "fmt"

// Lock takes one lock reference on the page with sequence hash seq and on
// every ancestor, as a running request does on the prefix it reads. A
// locked page is never evicted, dropped or purged from any tier. It
// returns the number of pages locked (the page's depth).
func (ix *Index) Lock(tenant string, seq uint64) (int, error) {
	n, err := ix.page("lock", tenant, seq)
	if err != nil {
		return 0, err
	}
	pages := 0
	for c := n; !c.isRoot; c = c.parent {
		c.lockRef++
		pages++
	}
	ix.afterMutation()
	return pages, nil
}

// Unlock releases one lock reference taken by Lock on the same page. If
// any page on the path holds no lock the call fails with ErrNotLocked and
// changes nothing.
func (ix *Index) Unlock(tenant string, seq uint64) (int, error) {
	n, err := ix.page("unlock", tenant, seq)
	if err != nil {
		return 0, err
	}
	for c := n; !c.isRoot; c = c.parent {
		if c.lockRef == 0 {
			return 0, fmt.Errorf("unlock block %d of tenant %q: page %d on its path holds no lock: %w",
				seq, tenant, c.seq, ErrNotLocked)
		}
	}
	pages := 0
	for c := n; !c.isRoot; c = c.parent {
		c.lockRef--
		pages++
	}
	ix.afterMutation()
	return pages, nil
}

func (ix *Index) page(op, tenant string, seq uint64) (*node, error) {
	if ts := ix.tenant(tenant); ts != nil {
		if n := ts.bySeq[seq]; n != nil {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s block %d of tenant %q: %w", op, seq, tenant, ErrUnknownBlock)
}
