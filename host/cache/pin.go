package cache

import (
	"fmt"
	"time"
)

// PinResult reports a pin.
type PinResult struct {
	// Pages counts the pages pinned: the targets and their ancestors.
	Pages int
	// NewlyPinned counts those that were not pinned before; they are what
	// the budget and quota were charged.
	NewlyPinned int
	// Unknown counts requested blocks that are not cached.
	Unknown int
}

// Pin pins the target pages and their ancestors for ttl: each page's pin
// count goes up by one, its pin_ttl becomes the larger of the old and ttl,
// and its expiry max(expiry, now+ttl). Pages newly pinned are charged to
// the pin budget and the tenant's quota; a pin that does not fit fails
// whole (ErrPinBudget, ErrTenantQuota) and changes nothing. Unknown hashes
// are counted and skipped; when nothing resolves Pin fails with
// ErrUnknownBlock.
func (ix *Index) Pin(t Target, ttl time.Duration) (PinResult, error) {
	if ttl <= 0 {
		return PinResult{}, fmt.Errorf("pin %s: ttl %v must be positive: %w", t, ttl, ErrBadTTL)
	}
	nodes, unknown := ix.resolve(t)
	res := PinResult{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("pin", t, unknown)
	}
	now := ix.clock.Now()
	pages := ix.closureOf(nodes)
	fresh := ix.countUnpinned(pages, now)
	ts := pages[0].tenant
	if err := ix.admitPins(ts, fresh, now); err != nil {
		// Sweeping may free budget held by lapsed pins elsewhere.
		if ix.sweepPins(now) == 0 {
			return res, fmt.Errorf("pin %s: %w", t, err)
		}
		fresh = ix.countUnpinned(pages, now)
		if err := ix.admitPins(ts, fresh, now); err != nil {
			return res, fmt.Errorf("pin %s: %w", t, err)
		}
	}
	expiry := now + ttl
	for _, n := range pages {
		ix.journalPage(n)
		if n.pinCount == 0 {
			ix.addPinned(n)
		}
		n.pinCount++
		n.w().pinTTL = max(n.r().pinTTL, ttl)
		n.w().pinExpiry = max(n.r().pinExpiry, expiry)
	}
	res.Pages, res.NewlyPinned = len(pages), fresh
	ix.afterMutation()
	return res, nil
}

// countUnpinned counts pages without a live pin, clearing lapsed pins on
// the way (lazy expiry) so they are charged afresh.
func (ix *Index) countUnpinned(pages []*node, now time.Duration) int {
	fresh := 0
	for _, n := range pages {
		if n.pinCount > 0 && now >= n.r().pinExpiry {
			ix.clearPin(n)
		}
		if n.pinCount == 0 {
			fresh++
		}
	}
	return fresh
}

// admitPins checks that fresh more pinned pages fit the budget and ts's
// quota.
func (ix *Index) admitPins(ts *tenantState, fresh int, now time.Duration) error {
	if fresh == 0 {
		return nil
	}
	if ts.quota > 0 && ts.pinned+fresh > ts.quota {
		return fmt.Errorf("%d more pinned pages would exceed tenant %q quota of %d (%d pinned): %w",
			fresh, ts.name, ts.quota, ts.pinned, ErrTenantQuota)
	}
	if ix.pinnedPages+fresh > ix.pinBudget {
		return fmt.Errorf("%d more pinned pages would exceed the %s tier budget of %d pages (%d pinned): %w",
			fresh, ix.pinBudgetTier, ix.pinBudget, ix.pinnedPages, ErrPinBudget)
	}
	return nil
}

// UnpinResult reports an unpin.
type UnpinResult struct {
	// Pages counts pages whose pin count went down (targets and ancestors).
	Pages int
	// Cleared counts pages whose pin count reached zero.
	Cleared int
	// NotPinned counts target pages that held no live pin; they and their
	// ancestors were left alone.
	NotPinned int
	// Unknown counts requested blocks that are not cached.
	Unknown int
}

// Unpin releases one pin reference from each target page that holds a live
// pin, and from its ancestors: the exact reverse of Pin on the same target,
// so a double pin needs a double unpin. A target without a live pin is
// counted and changes nothing, so an unpin can never take a reference that
// another pin holds on a shared ancestor.
func (ix *Index) Unpin(t Target) (UnpinResult, error) {
	nodes, unknown := ix.resolve(t)
	res := UnpinResult{Unknown: unknown}
	if len(nodes) == 0 {
		return res, unknownErr("unpin", t, unknown)
	}
	now := ix.clock.Now()
	nodes = ix.dedup(nodes)
	live := nodes[:0]
	for _, n := range nodes {
		if n.pinCount > 0 && now >= n.r().pinExpiry {
			ix.clearPin(n)
		}
		if n.pinCount == 0 {
			res.NotPinned++
			continue
		}
		live = append(live, n)
	}
	for _, n := range ix.closureOf(live) {
		if n.pinCount == 0 {
			continue
		}
		if now >= n.r().pinExpiry {
			ix.clearPin(n)
			continue
		}
		res.Pages++
		ix.journalPage(n)
		n.pinCount--
		if n.pinCount == 0 {
			ix.clearPin(n)
			res.Cleared++
		}
	}
	ix.afterMutation()
	return res, nil
}

func (ix *Index) addPinned(n *node) {
	n.w().pinPrev = nil
	n.w().pinNext = ix.pinnedHead
	if ix.pinnedHead != nil {
		ix.pinnedHead.w().pinPrev = n
	}
	ix.pinnedHead = n
	ix.pinnedPages++
	ix.notePinned()
	n.tenant.pinned++
}

// clearPin drops n's pin entirely (count to zero, off the pinned list).
func (ix *Index) clearPin(n *node) {
	ix.journalPage(n)
	if n.r().pinPrev != nil {
		n.r().pinPrev.w().pinNext = n.r().pinNext
	} else {
		ix.pinnedHead = n.r().pinNext
	}
	if n.r().pinNext != nil {
		n.r().pinNext.w().pinPrev = n.r().pinPrev
	}
	n.pinCount = 0
	if w := n.rare; w != nil {
		w.pinPrev, w.pinNext = nil, nil
		w.pinTTL, w.pinExpiry = 0, 0
	}
	n.tidy()
	ix.pinnedPages--
	n.tenant.pinned--
}

// sweepPins clears every lapsed pin and returns how many.
func (ix *Index) sweepPins(now time.Duration) int {
	cleared := 0
	for n := ix.pinnedHead; n != nil; {
		next := n.r().pinNext
		if now >= n.r().pinExpiry {
			ix.clearPin(n)
			cleared++
		}
		n = next
	}
	return cleared
}
