package cache

import (
	"fmt"
	"time"
)

// Result reports a directive that touches a set of pages.
type Result struct {
	// Pages counts the pages changed.
	Pages int
	// Unknown counts requested blocks that are not cached.
	Unknown int
}

// MaxPriority is the highest retention priority.
const MaxPriority = 100

// Retain is a soft pin: the target pages and their ancestors get retention
// priority for d (priority and expiry are replaced, not merged). Eviction
// takes unprioritized or lapsed pages first by LRU, then pages by ascending
// priority. Priority 0 clears retention.
func (ix *Index) Retain(t Target, priority int, d time.Duration) (Result, error) {
	if priority < 0 || priority > MaxPriority {
		return Result{}, fmt.Errorf("retain %s: priority %d outside 0..%d: %w", t, priority, MaxPriority, ErrBadPriority)
	}
	if d <= 0 && priority > 0 {
		return Result{}, fmt.Errorf("retain %s: duration %v must be positive: %w", t, d, ErrBadTTL)
	}
	nodes, unknown := ix.resolve(t)
	res := Result{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("retain", t, unknown)
	}
	now := ix.clock.Now()
	pages := ix.closureOf(nodes)
	for _, n := range pages {
		n.priority = uint8(priority)
		n.w().retainExpiry = 0
		if priority > 0 {
			n.w().retainExpiry = now + d
		}
		n.tidy()
	}
	res.Pages = len(pages)
	ix.afterMutation()
	return res, nil
}
