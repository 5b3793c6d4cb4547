package cache

import "time"

// The journal lets a caller apply several reversible operations (Pin,
// Unpin, MarkTransient) and then undo all of them exactly, expiry and TTL
// included, which re-applying the inverse operation cannot do: an undone
// unpin would come back with a new expiry. The directive executor opens one
// around each turn so a refused turn changes nothing.
//
// Only pin state and the transient flag are journaled. Operations that
// remove pages (prune, purge, revoke) or plan transitions must not run
// inside a journal; with the invariants tag, doing so panics.

// savedPin is a page's reversible state before the journal's first change.
type savedPin struct {
	n         *node
	pinCount  uint32
	pinTTL    time.Duration
	pinExpiry time.Duration
	transient bool
}

type journal struct {
	active bool
	gen    uint64 // pages saved in this journal carry node.journalGen == gen
	saved  []savedPin
}

// BeginJournal starts recording reversible changes. Journals do not nest.
func (ix *Index) BeginJournal() {
	if ix.jr.active {
		panic("cache: BeginJournal inside an open journal")
	}
	ix.jr.active = true
	ix.jr.gen++
	ix.jr.saved = ix.jr.saved[:0]
}

// CommitJournal keeps the changes and closes the journal.
func (ix *Index) CommitJournal() {
	ix.jr.active = false
	clear(ix.jr.saved)
	ix.jr.saved = ix.jr.saved[:0]
}

// RollbackJournal restores every journaled page to its state at
// BeginJournal and closes the journal.
func (ix *Index) RollbackJournal() {
	for i := len(ix.jr.saved) - 1; i >= 0; i-- {
		s := ix.jr.saved[i]
		n := s.n
		if n.dead {
			continue // removed inside the journal: a caller bug the invariants build reports
		}
		switch was, is := s.pinCount > 0, n.pinCount > 0; {
		case was && !is:
			ix.addPinned(n)
		case !was && is:
			ix.clearPin(n)
		}
		n.pinCount, n.transient = s.pinCount, s.transient
		if s.pinTTL != 0 || s.pinExpiry != 0 || n.rare != nil {
			w := n.w()
			w.pinTTL, w.pinExpiry = s.pinTTL, s.pinExpiry
		}
	}
	ix.CommitJournal()
	ix.afterMutation()
}

// AbortJournal rolls back the open journal, if any: for a caller that
// unwinds from a panic in the middle of its turn (host/internal/guarded),
// so the turn changes nothing and the next one can open a journal.
func (ix *Index) AbortJournal() {
	if ix.jr.active {
		ix.RollbackJournal()
	}
}

// journalPage saves n's reversible state the first time the open journal
// sees it change. Call before changing pin state or the transient flag.
func (ix *Index) journalPage(n *node) {
	if !ix.jr.active || n.journalGen == ix.jr.gen {
		return
	}
	n.journalGen = ix.jr.gen
	ix.jr.saved = append(ix.jr.saved, savedPin{n: n, pinCount: n.pinCount, pinTTL: n.r().pinTTL, pinExpiry: n.r().pinExpiry, transient: n.transient})
}
