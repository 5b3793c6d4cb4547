// Package errmap is the one place the host's Go errors become registry
// codes (sdk/errcode): the index's, the pools' and the splicer's sentinels,
// and a context's end. The executor and the engine service both answer
// with it, so an error means the same code whichever door it comes out of.
package errmap

import (
	"context"
	"errors"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// codes maps each sentinel to its registry code; the first match wins, so
// a splice error wrapping an index error gets the splice's code.
var codes = []struct {
	err  error
	code errcode.Code
}{
	{splice.ErrUnknownSession, errcode.UnknownSession},
	{splice.ErrCapacity, errcode.CapacityExhausted},
	{splice.ErrNoDevice, errcode.Unavailable},
	{cache.ErrSpliceSpan, errcode.InvalidSpan},
	{cache.ErrSpliceOverlap, errcode.OverlappingSpans},
	{cache.ErrSpliceSink, errcode.SinkProtected},
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
	{pool.ErrFull, errcode.CapacityExhausted},
	{pool.ErrBadSlot, errcode.InvalidSlot},
	{pool.ErrDoubleFree, errcode.InvalidSlot},
	{context.DeadlineExceeded, errcode.DeadlineExceeded},
	{context.Canceled, errcode.Unavailable},
}

// Code is err's registry code: the code of a registry error it wraps, or
// of the first sentinel it matches; Internal (a bug, not a client's
// error) when neither.
func Code(err error) errcode.Code {
	if e, ok := errcode.As(err); ok {
		return e.Code
	}
	for _, m := range codes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return errcode.Internal
}

// Wrap makes err a registry error under its code, with context (a
// format and its arguments) in front of err's own message, which names
// the block, tier or budget. A registry error is returned as it is.
func Wrap(err error, format string, args ...any) *errcode.Error {
	if err == nil {
		return nil
	}
	if e, ok := errcode.As(err); ok {
		return e
	}
	return errcode.Wrap(Code(err), err, format, args...)
}
