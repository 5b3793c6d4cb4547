// Package errmap is the one place the host's Go errors become registry
// codes (sdk/errcode): the index's, the pools' and the splicer's sentinels,
// and a context's end. The executor and the engine service both answer
// with it, so an error means the same code whichever door it comes out of.
//
// Every exported sentinel of cache, pool and splice is listed here, either
// with the code a client sees or as internal: one that reaches a client only
// through a bug. The package test parses those packages and fails when a new
// sentinel is in neither list, so adding one is a decision, not a default.
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
	{splice.ErrRecompute, errcode.RecomputeUnsupported},
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

// internal are the sentinels a client request cannot cause: a config the
// host refused at start, a state another component handles (the mover's
// transitions, the disk's corrupt pages) or a broken invariant. They read as
// errcode.Internal; they are listed so that a new sentinel is a decision.
var internal = []error{
	cache.ErrBadConfig, cache.ErrNotLocked, cache.ErrPinned, cache.ErrLeased,
	cache.ErrHashCollision, cache.ErrNotResident, cache.ErrHasChildren,
	cache.ErrTransient, cache.ErrUnknownTransition, cache.ErrTransitionCancelled,
	cache.ErrTransitionOrder, cache.ErrAlreadyResident, cache.ErrSpliceStale,
	pool.ErrNotFound, pool.ErrCorrupt, pool.ErrPageSize, pool.ErrClosed, pool.ErrKey,
	splice.ErrUnsupported, splice.ErrFill,
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

// Sentinel is one listed sentinel and the code a client sees for it.
type Sentinel struct {
	Err  error
	Code errcode.Code
}

// Sentinels returns every listed sentinel with its code, internal ones
// included, so that a caller's tests can check that it maps through here.
func Sentinels() []Sentinel {
	out := make([]Sentinel, 0, len(codes)+len(internal))
	for _, r := range codes {
		out = append(out, Sentinel{r.err, r.code})
	}
	for _, e := range internal {
		out = append(out, Sentinel{e, errcode.Internal})
	}
	return out
}
