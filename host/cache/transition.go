package cache

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvpilot/kvpilot/host/tier"
)

// TransitionKind is what a transition does.
type TransitionKind uint8

const (
	// Copy writes the page from tier From to tier To; the source stays.
	Copy TransitionKind = iota + 1
	// Drop frees the page's copy on tier From.
	Drop
)

func (k TransitionKind) String() string {
	switch k {
	case Copy:
		return "copy"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("TransitionKind(%d)", uint8(k))
}

// Reason says why a transition was planned, for metrics and logs.
type Reason uint8

const (
	ReasonEvict        Reason = iota + 1 // a tier above its high watermark
	ReasonDemote                         // eviction that keeps a copy on a colder tier
	ReasonWriteThrough                   // device write-through to host
	ReasonPause                          // a lease moving pages to its pause tier
	ReasonFetch                          // warm or load-back
	ReasonPin                            // a pinned page written through to disk
	ReasonPersist                        // a page written to disk before the host stops
)

var reasonNames = [...]string{"", "evict", "demote", "write-through", "pause", "fetch", "pin", "persist"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && r != 0 {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Transition is one step for the mover. The index reserves it when it is
// planned (the page is not planned again until it ends) and applies it only
// when the mover reports back:
//
//   - Copy: read the page at FromLoc on From, write it to a slot on To, then
//     call CompleteCopy with the new slot. On an error from CompleteCopy the
//     mover frees that slot.
//   - Drop: call CompleteDrop first and free the slot at FromLoc on From only
//     when it succeeds: the drop is refused if the page became busy (locked,
//     now the last copy of a pinned page, gained children on From).
//     ErrTransitionOrder is not a refusal: the drop stays planned and waits
//     for the copy named by After, for copies still reading the page, or
//     for its children's drops from From (Plan drops a whole subtree at
//     once); call CompleteDrop again once those have been reported.
//   - If the work cannot be done, call FailTransition.
//
// After, when non-zero, names a transition that must be completed first
// (a copy of the page's parent to the same tier, or the copy a demotion
// drop waits for).
type Transition struct {
	ID      uint64
	Kind    TransitionKind
	Reason  Reason
	Tenant  string
	Seq     uint64
	From    tier.Tier
	To      tier.Tier // Copy only
	FromLoc uint64
	After   uint64
}

func (t Transition) String() string {
	if t.Kind == Copy {
		return fmt.Sprintf("#%d copy %d %s->%s (%s)", t.ID, t.Seq, t.From, t.To, t.Reason)
	}
	return fmt.Sprintf("#%d drop %d from %s (%s)", t.ID, t.Seq, t.From, t.Reason)
}

type pending struct {
	t    Transition
	n    *node
	live bool // false once cancelled; the record stays until the mover reports
}

func (ix *Index) reserve(n *node, kind TransitionKind, reason Reason, from, to tier.Tier, after uint64) Transition {
	ix.nextID++
	t := Transition{ID: ix.nextID, Kind: kind, Reason: reason, Tenant: n.tenant.name, Seq: n.seq,
		From: from, FromLoc: n.loc[from], After: after}
	n.pending++
	if kind == Copy {
		t.To = to
		n.inbound = n.inbound.with(to)
		n.srcBusy[from]++
		n.lastCopy = t.ID
		ix.pendingIn[to]++
	} else {
		n.dropping = n.dropping.with(from)
		n.parent.childDrops[from]++
		ix.pendingDrop[from]++
	}
	ix.inflight[t.ID] = &pending{t: t, n: n, live: true}
	return t
}

// release undoes a live reservation's accounting.
func (ix *Index) release(p *pending) {
	if !p.live {
		return
	}
	p.live = false
	n, t := p.n, p.t
	if t.Reason == ReasonPin {
		ix.notePinned() // landed, failed or cancelled: look again
	}
	n.pending--
	if t.Kind == Copy {
		n.inbound = n.inbound.without(t.To)
		n.srcBusy[t.From]--
		if n.lastCopy == t.ID {
			n.lastCopy = 0
		}
		ix.pendingIn[t.To]--
	} else {
		n.dropping = n.dropping.without(t.From)
		n.parent.childDrops[t.From]--
		ix.pendingDrop[t.From]--
	}
}

// cancelTransitionsOf cancels every live transition of a node leaving the
// index.
func (ix *Index) cancelTransitionsOf(n *node) {
	for _, p := range ix.inflight {
		if p.n == n && p.live {
			ix.release(p)
		}
	}
}

// cancelDependents cancels the live transitions that wait for transition
// id, directly or through another cancelled copy. A cancelled
// write-through goes back to the queue: nothing else would plan it again,
// and the page still needs its host copy once the copy it waited for is
// retried. They are queued parents first (by transition id: a copy is
// always reserved after the one it waits for), so the next Plan can chain
// them in one pass.
func (ix *Index) cancelDependents(id uint64) {
	wt := ix.cancelChain(id, ix.requeue[:0])
	if len(wt) > 1 {
		slices.SortFunc(wt, func(a, b *pending) int { return cmp.Compare(a.t.ID, b.t.ID) })
	}
	for _, p := range wt {
		if !p.n.dead {
			ix.queueWriteThrough(p.n)
		}
	}
	clear(wt)
	ix.requeue = wt[:0]
}

// cancelChain releases the live transitions waiting for id, recursively,
// and appends the write-through copies among them to wt.
func (ix *Index) cancelChain(id uint64, wt []*pending) []*pending {
	for _, p := range ix.inflight {
		if p.live && p.t.After == id {
			ix.release(p)
			if p.t.Kind == Copy {
				if p.t.Reason == ReasonWriteThrough {
					wt = append(wt, p)
				}
				wt = ix.cancelChain(p.t.ID, wt)
			}
		}
	}
	return wt
}

func (ix *Index) take(op string, t Transition) (*pending, error) {
	p := ix.inflight[t.ID]
	if p == nil || p.t.Kind != t.Kind {
		return nil, fmt.Errorf("%s %v: %w", op, t, ErrUnknownTransition)
	}
	return p, nil
}

// CompleteCopy records that the copy's bytes landed at dstLoc on t.To and
// emits stored(t.To). It fails, changing nothing, when the page changed
// under the copy: then the mover frees dstLoc.
func (ix *Index) CompleteCopy(t Transition, dstLoc uint64) error {
	p, err := ix.take("complete copy", t)
	if err != nil {
		return err
	}
	delete(ix.inflight, t.ID)
	if !p.live {
		return fmt.Errorf("complete copy %v: the page changed while it ran: %w", p.t, ErrTransitionCancelled)
	}
	ix.release(p)
	defer ix.afterMutation()
	n, t := p.n, p.t
	var bad error
	switch {
	case !n.resident.Has(t.From) || n.loc[t.From] != t.FromLoc:
		bad = fmt.Errorf("source copy on %s is gone: %w", t.From, ErrNotResident)
	case n.resident.Has(t.To):
		bad = fmt.Errorf("page already on %s: %w", t.To, ErrAlreadyResident)
	case !n.parent.isRoot && !n.parent.resident.Has(t.To):
		bad = fmt.Errorf("parent %d is not on %s: %w", n.parent.seq, t.To, ErrNotResident)
	case n.transient && t.To.Colder(t.From):
		bad = fmt.Errorf("copy to colder %s: %w", t.To, ErrTransient)
	}
	if bad != nil {
		// The page first, then the copies that waited for it: the queue
		// keeps parents ahead of children.
		if t.Reason == ReasonWriteThrough {
			ix.queueWriteThrough(n)
		}
		ix.cancelDependents(t.ID)
		return fmt.Errorf("complete copy %v: %w", t, bad)
	}
	ix.addResidency(n, t.To, dstLoc)
	if t.Reason == ReasonPin {
		ix.pinFailures = 0
	}
	return nil
}

// CompleteDrop applies a planned drop: the page leaves t.From and
// removed(t.From) is emitted. Call it before freeing the slot; on an error
// the slot stays in use. ErrTransitionOrder means something planned
// before it has not been reported yet: the copy named by t.After, a copy
// reading this copy, or the drops of every child still on t.From (Plan
// drops a subtree in one plan, and prefix closure lets the parent go only
// after them). The drop then stays planned and may be completed later. A
// child on t.From with no drop planned there refuses the drop
// (ErrHasChildren), since waiting would not help.
func (ix *Index) CompleteDrop(t Transition) error {
	p, err := ix.take("complete drop", t)
	if err != nil {
		return err
	}
	if !p.live {
		delete(ix.inflight, t.ID)
		return fmt.Errorf("complete drop %v: the page changed while it waited: %w", p.t, ErrTransitionCancelled)
	}
	n, t := p.n, p.t
	if a := ix.inflight[t.After]; t.After != 0 && a != nil && a.live {
		return fmt.Errorf("complete drop %v: transition #%d must complete first: %w", t, t.After, ErrTransitionOrder)
	}
	if n.srcBusy[t.From] > 0 {
		return fmt.Errorf("complete drop %v: a copy still reads it: %w", t, ErrTransitionOrder)
	}
	if c := n.childrenOn[t.From]; c > 0 && c == n.childDrops[t.From] && n.loc[t.From] == t.FromLoc {
		return fmt.Errorf("complete drop %v: the drops of its %d children on %s must complete first: %w",
			t, c, t.From, ErrTransitionOrder)
	}
	delete(ix.inflight, t.ID)
	ix.release(p)
	defer ix.afterMutation()
	now := ix.clock.Now()
	last := n.resident == TierSet(0).with(t.From)
	var bad error
	switch {
	case !n.resident.Has(t.From) || n.loc[t.From] != t.FromLoc:
		bad = fmt.Errorf("no copy on %s at %d: %w", t.From, t.FromLoc, ErrNotResident)
	case n.childrenOn[t.From] > 0:
		bad = fmt.Errorf("%d children on %s: %w", n.childrenOn[t.From], t.From, ErrHasChildren)
	case n.lockRef > 0:
		bad = fmt.Errorf("lock_ref %d: %w", n.lockRef, ErrLocked)
	case last && n.pinned(now):
		bad = fmt.Errorf("last copy: %w", ErrPinned)
	case last && n.leaseHeld():
		bad = fmt.Errorf("last copy: %w", ErrLeased)
	}
	if bad != nil {
		return fmt.Errorf("complete drop %v: %w", t, bad)
	}
	ix.removeResidency(n, t.From)
	return nil
}

// FailTransition abandons a transition the mover could not carry out.
// Transitions waiting for it are cancelled; a failed write-through, and
// every write-through cancelled because it waited for the failed copy, is
// queued again, so a later Plan retries them.
func (ix *Index) FailTransition(t Transition) error {
	err := ix.failTransition(t)
	if err == nil {
		ix.afterMutation()
	}
	return err
}

// FailTransitions abandons several transitions, in order, as FailTransition
// does each, with one error per transition (nil where it was abandoned).
// A cancelled batch fails all its transitions at once; one call for them
// holds the index once, and an invariants build checks the whole index
// once rather than once per transition.
func (ix *Index) FailTransitions(ts []Transition) []error {
	errs := make([]error, len(ts))
	changed := false
	for i, t := range ts {
		errs[i] = ix.failTransition(t)
		changed = changed || errs[i] == nil
	}
	if changed {
		ix.afterMutation()
	}
	return errs
}

func (ix *Index) failTransition(t Transition) error {
	p := ix.inflight[t.ID]
	if p == nil {
		return fmt.Errorf("fail %v: %w", t, ErrUnknownTransition)
	}
	delete(ix.inflight, t.ID)
	wasLive := p.live
	ix.release(p)
	if p.t.Kind == Copy {
		// A cancelled write-through was queued again when it was
		// cancelled; a live one is queued here, ahead of the copies that
		// waited for it.
		if wasLive && p.t.Reason == ReasonWriteThrough && !p.n.dead {
			ix.queueWriteThrough(p.n)
		}
		ix.cancelDependents(p.t.ID)
		if wasLive && p.t.Reason == ReasonPause && !p.n.dead {
			ix.failedPauseCopy(p.n, p.t.To)
		}
		if wasLive && p.t.Reason == ReasonPin {
			ix.failedPinCopy()
		}
	}
	return nil
}

// InFlight returns the number of planned transitions not yet reported.
func (ix *Index) InFlight() int { return len(ix.inflight) }
