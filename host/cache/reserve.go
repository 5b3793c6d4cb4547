package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Reserve counts n slots of tier t as used although no page occupies them
// yet: slots handed to a running request that has not committed them.
// Plan counts reserved slots in the tier's usage, so when requests hold
// slots of a full pool the index evicts committed pages to make room
// instead of letting the pool run dry while its usage looks low. The caller
// releases the reservation with Unreserve as the slots are committed
// (their pages then count as resident) or freed.
func (ix *Index) Reserve(t tier.Tier, n int) error {
	if !t.Valid() || n < 0 {
		return fmt.Errorf("reserve %d slots of tier %v: %w", n, t, ErrBadArgument)
	}
	ix.reserved[t] += n
	return nil
}

// Unreserve releases n slots reserved with Reserve. Releasing more than is
// reserved fails and changes nothing: the caller's accounting is wrong.
func (ix *Index) Unreserve(t tier.Tier, n int) error {
	if !t.Valid() || n < 0 || n > ix.reserved[t] {
		return fmt.Errorf("unreserve %d slots of tier %v (%d reserved): %w", n, t, ix.reserved[t], ErrBadArgument)
	}
	ix.reserved[t] -= n
	return nil
}

// Reserved returns the slots of tier t reserved now.
func (ix *Index) Reserved(t tier.Tier) int {
	if !t.Valid() {
		return 0
	}
	return ix.reserved[t]
}
