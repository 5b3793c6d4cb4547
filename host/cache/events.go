package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/tier"
)

// EventKind says what happened to a page on a tier.
type EventKind uint8

const (
	// Stored: the page's bytes landed on the tier.
	Stored EventKind = iota + 1
	// Removed: the page left the tier.
	Removed
	// Cleared: the tier was emptied by a reset (only Tier is set).
	Cleared
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one KV event, in the order the index applied it. A move emits
// Stored on the new tier before Removed on the old one, because the mover
// completes the copy before the drop.
type Event struct {
	Kind      EventKind
	Tier      tier.Tier
	Tenant    string
	Seq       uint64 // block_hash
	Local     uint64 // tokens_hash
	Parent    uint64 // parent_hash, when HasParent
	HasParent bool
}

func (ix *Index) emit(kind EventKind, n *node, t tier.Tier) {
	ev := Event{Kind: kind, Tier: t, Tenant: n.tenant.name, Seq: n.seq, Local: n.local}
	ev.Parent, ev.HasParent = n.parentSeq()
	if ix.cfg.OnEvent != nil {
		ix.cfg.OnEvent(ev)
		return
	}
	ix.events = append(ix.events, ev)
}

// DrainEvents appends the buffered events to dst, empties the buffer and
// returns dst. With Config.OnEvent set the buffer stays empty.
func (ix *Index) DrainEvents(dst []Event) []Event {
	dst = append(dst, ix.events...)
	clear(ix.events)
	ix.events = ix.events[:0]
	return dst
}

// PendingEvents returns how many events wait in the buffer.
func (ix *Index) PendingEvents() int { return len(ix.events) }
