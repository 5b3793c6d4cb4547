package executor

import (
	"errors"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// cacheCodes maps the index's sentinels to registry codes. Anything else
// the index returns is internal: a bug, not a client error.
var cacheCodes = []struct {
	err  error
	code errcode.Code
}{
	{cache.ErrUnknownBlock, errcode.UnknownBlock},
	{cache.ErrPinBudget, errcode.PinBudgetExhausted},
	{cache.ErrTenantQuota, errcode.TenantQuota},
	{cache.ErrBadTTL, errcode.InvalidTTL},
	{cache.ErrBadPriority, errcode.InvalidPriority},
	{cache.ErrLocked, errcode.BlockLocked},
	{cache.ErrUnknownLease, errcode.UnknownLease},
	{cache.ErrLeaseExists, errcode.LeaseExists},
	{cache.ErrCapacity, errcode.CapacityExhausted},
	{cache.ErrBadArgument, errcode.BadRequest},
}

// fromCache wraps an index error as a registry error, keeping the index's
// message (which names the block, tier or budget) as the detail.
func fromCache(err error) *errcode.Error {
	if err == nil {
		return nil
	}
	for _, m := range cacheCodes {
		if errors.Is(err, m.err) {
			return errcode.Wrap(m.code, err, "")
		}
	}
	return errcode.Wrap(errcode.Internal, err, "cache index")
}
