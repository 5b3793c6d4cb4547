package cache

import (
	"github.com/kvpilot/kvpilot/host/tier"
)

// Freed is a slot the caller must free in a pool because the index removed
// the page on its own authority (prune, purge, revoke) or recorded its
// copy lost (LoseCopy).
type Freed struct {
	Tenant string
	Seq    uint64
	Tier   tier.Tier
	Loc    uint64
}

func (ix *Index) newNode(ts *tenantState, parent *node, local, seq uint64) *node {
	n := &node{tenant: ts, seq: seq, local: local}
	link(parent, n)
	ts.bySeq[seq] = n
	return n
}

// addResidency records that n's bytes are on t at loc and emits stored(t).
// The parent must already be resident on t (prefix closure).
func (ix *Index) addResidency(n *node, t tier.Tier, loc uint64) {
	n.resident = n.resident.with(t)
	n.loc[t] = loc
	if !n.parent.isRoot {
		n.parent.childrenOn[t]++
	}
	ix.resident[t]++
	ix.emit(Stored, n, t)
}

// removeResidency forgets n's copy on t and emits removed(t). When it was
// the last copy the node leaves the index; prefix closure guarantees it has
// no children then.
func (ix *Index) removeResidency(n *node, t tier.Tier) {
	n.resident = n.resident.without(t)
	n.loc[t] = 0
	if !n.parent.isRoot {
		n.parent.childrenOn[t]--
	}
	ix.resident[t]--
	if t == tier.Disk && n.pinCount > 0 {
		ix.notePinned() // a pinned page lost its durable copy
	}
	ix.emit(Removed, n, t)
	if n.resident == 0 {
		ix.removeNode(n)
	}
}

// removeNode drops a node that is resident nowhere from the tree and every
// index structure, releasing its pin and cancelling its transitions.
func (ix *Index) removeNode(n *node) {
	if invariantsOn && ix.jr.active {
		panic("cache: a page was removed inside an open journal; only Pin, Unpin and MarkTransient may run there")
	}
	if n.pinCount > 0 {
		ix.clearPin(n)
	}
	if n.pending > 0 {
		ix.cancelTransitionsOf(n)
	}
	unlink(n)
	delete(n.tenant.bySeq, n.seq)
	n.dead = true
}

// purgeEverywhere removes n from every tier at once, appending the freed
// slots. n must have no children.
func (ix *Index) purgeEverywhere(n *node, freed []Freed) []Freed {
	for _, t := range tier.All {
		if n.resident.Has(t) {
			freed = append(freed, Freed{Tenant: n.tenant.name, Seq: n.seq, Tier: t, Loc: n.loc[t]})
			ix.removeResidency(n, t)
		}
	}
	return freed
}
