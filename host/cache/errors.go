package cache

import "errors"

// Sentinel errors. Every error the index returns wraps one of these with
// context (which block, which tier, which budget), so callers test with
// errors.Is and show the message to clients as it is.
var (
	// ErrBadConfig: the Config given to New is invalid.
	ErrBadConfig = errors.New("invalid cache index config")
	// ErrBadArgument: a call's arguments are malformed (lengths disagree, a
	// tier out of range, an empty lease id where one is needed).
	ErrBadArgument = errors.New("invalid argument")
	// ErrUnknownBlock: no hash in the request names a cached page.
	ErrUnknownBlock = errors.New("unknown block")
	// ErrPinBudget: the pin would exceed a tier's pinned-page budget.
	ErrPinBudget = errors.New("pin budget exceeded")
	// ErrTenantQuota: the pin would exceed the tenant's pinned-page quota.
	ErrTenantQuota = errors.New("tenant pin quota exceeded")
	// ErrBadTTL: a pin, retention or lease duration is not positive.
	ErrBadTTL = errors.New("invalid ttl")
	// ErrBadPriority: a retention priority outside 0..100.
	ErrBadPriority = errors.New("invalid retention priority")
	// ErrLocked: the page is held by a running request.
	ErrLocked = errors.New("block is locked")
	// ErrNotLocked: an unlock found a page with no lock to release.
	ErrNotLocked = errors.New("block is not locked")
	// ErrPinned: the operation would drop the last copy of a pinned page.
	ErrPinned = errors.New("block is pinned")
	// ErrLeased: the operation would drop the last copy of a paused page.
	ErrLeased = errors.New("block is leased")
	// ErrUnknownLease: no lease has that id (it may have expired).
	ErrUnknownLease = errors.New("unknown lease")
	// ErrCapacity: a tier has no room for what the call needs there, even
	// after its eviction rules took what they may.
	ErrCapacity = errors.New("tier capacity exhausted")
	// ErrLeaseExists: a lease with that id is already held.
	ErrLeaseExists = errors.New("lease already exists")
	// ErrHashCollision: a sequence hash is already used by a page with a
	// different parent or local hash.
	ErrHashCollision = errors.New("sequence hash collision")
	// ErrNotResident: a transition's source copy, or a parent the
	// destination needs, is not resident where it must be.
	ErrNotResident = errors.New("block not resident")
	// ErrHasChildren: dropping the page from a tier would orphan children
	// resident there.
	ErrHasChildren = errors.New("block has resident children")
	// ErrTransient: a transient page may not be copied to a colder tier.
	ErrTransient = errors.New("block is transient")
	// ErrUnknownTransition: the index does not know the transition (never
	// planned, already completed, or forgotten by a reset).
	ErrUnknownTransition = errors.New("unknown transition")
	// ErrTransitionCancelled: the transition's page changed under it (removed,
	// or a copy it depended on failed); the mover must undo its side, e.g.
	// free the destination slot.
	ErrTransitionCancelled = errors.New("transition cancelled")
	// ErrTransitionOrder: a drop was completed before the copy it depends on.
	ErrTransitionOrder = errors.New("transition completed out of order")
	// ErrAlreadyResident: the copy's destination already holds the page.
	ErrAlreadyResident = errors.New("block already resident")
)
