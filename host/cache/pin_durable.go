package cache

import (
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Pins must survive a restart, and after one only the disk tier's pages
// come back (the device and host tiers are memory). So Plan writes every
// pinned page through to the disk tier, parents first, as soon as it is
// pinned: an operator's pins came back after SIGKILL only when their pages
// happened to be on disk (1 of 4). Pinned pages on the disk tier are never
// evicted while pinned, and distinct pinned pages never exceed the disk
// tier's pin budget (Pin refuses past the smallest tier budget), so the
// copies fit within that budget.
//
// Scanning the pinned list costs O(pinned pages), so it runs only while
// pinsDirty says some pinned page may lack a disk copy: set when a page is
// pinned, when a pin copy ends (landed, failed or cancelled) and when a
// pinned page loses its disk copy; cleared by a scan that found every
// pinned page on disk or on its way. Failed copies back off as leases do
// (lease_health.go), on the index's clock.

// notePinned marks that a pinned page may need its disk copy.
func (ix *Index) notePinned() { ix.pinsDirty = true }

func (ix *Index) planPinDurable(now time.Duration, dst []Transition) []Transition {
	const D = tier.Disk
	if !ix.pinsDirty || !ix.present(D) || now < ix.pinRetryAt {
		return dst
	}
	done := true
	for n := ix.pinnedHead; n != nil; n = n.r().pinNext {
		if n.dead || n.transient || n.resident.Has(D) || n.inbound.Has(D) {
			continue
		}
		done = false
		if n.pending > 0 {
			continue // its copy is planned once the transition ends
		}
		after, ok := parentReady(n, D)
		src, okSrc := copySource(n)
		switch {
		case !ok || !okSrc:
			// The parent (pinned too: pins take their ancestors) is
			// copied first; this page follows in a later plan.
		case ix.used(D) >= ix.cfg.Tiers[D].Capacity:
			ix.roomWant[D]++ // the disk tier's eviction makes the room
		default:
			dst = append(dst, ix.reserve(n, Copy, ReasonPin, src, D, after))
		}
	}
	if done {
		ix.pinsDirty = false
	}
	return dst
}

// failedPinCopy backs the pin copies off after a failure.
func (ix *Index) failedPinCopy() {
	ix.pinFailures++
	ix.pinRetryAt = ix.clock.Now() + min(leaseRetryBase<<min(ix.pinFailures-1, 16), leaseRetryMax)
}
