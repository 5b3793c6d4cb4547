//go:build invariants

package memfd

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/pool"
)

// checkAllocated refuses copies to or from a free slot: that is a mover or
// index bug (it would read garbage or overwrite a page being reused). It
// takes the allocator's lock per page, so only invariants builds pay it.
func checkAllocated(a *Arena, s pool.Slot) error {
	if !a.alloc.Allocated(s) {
		return fmt.Errorf("%s arena: slot %d: %w (not allocated)", a.tier, s, pool.ErrBadSlot)
	}
	return nil
}
