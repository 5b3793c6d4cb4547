package mover

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
)

// outcome is what happened to one transition.
type outcome struct {
	t       cache.Transition
	err     error
	refused bool // the index declined (the page changed); nothing is wrong
	bytes   int64
	took    time.Duration
	corrupt *pool.Key
	lost    cache.LossResult
}

// Report sums up a batch, for metrics, logs and the caller's decision.
type Report struct {
	// Copied and Dropped count transitions the index accepted.
	Copied, Dropped int
	// Refused counts transitions the index declined because the page
	// changed meanwhile (locked, cancelled, already there): not errors.
	Refused int
	// Failed counts transitions that could not be carried out; Errors
	// holds their errors (the first 16).
	Failed int
	Errors []error
	// Corrupt lists stored pages found corrupt (and dropped by their store).
	Corrupt []pool.Key
	// LostCopies counts the copies the index forgot because of them: each
	// corrupt copy and its descendants' copies on the same tier (freed in
	// their pools too). LostPages of those pages were on no other tier and
	// left the index; LostProtected of these were pinned, leased or
	// locked: data loss an operator must see, not a cache miss.
	LostCopies, LostPages, LostProtected int
	// Bytes moved by accepted copies, and the slowest transfer.
	Bytes   int64
	Slowest time.Duration
}

const maxErrors = 16

func (r *Report) add(o outcome) {
	switch {
	case o.err != nil:
		r.Failed++
		if len(r.Errors) < maxErrors {
			r.Errors = append(r.Errors, fmt.Errorf("%v: %w", o.t, o.err))
		}
	case o.refused:
		r.Refused++
	case o.t.Kind == cache.Copy:
		r.Copied++
		r.Bytes += o.bytes
	default:
		r.Dropped++
	}
	if o.corrupt != nil {
		r.Corrupt = append(r.Corrupt, *o.corrupt)
	}
	r.LostCopies += o.lost.Copies
	r.LostPages += o.lost.Removed
	r.LostProtected += o.lost.Lost
	r.Slowest = max(r.Slowest, o.took)
}

// Merge adds another report's counts into r.
func (r *Report) Merge(o Report) {
	r.Copied += o.Copied
	r.Dropped += o.Dropped
	r.Refused += o.Refused
	r.Failed += o.Failed
	for _, e := range o.Errors {
		if len(r.Errors) < maxErrors {
			r.Errors = append(r.Errors, e)
		}
	}
	r.Corrupt = append(r.Corrupt, o.Corrupt...)
	r.LostCopies += o.LostCopies
	r.LostPages += o.LostPages
	r.LostProtected += o.LostProtected
	r.Bytes += o.Bytes
	r.Slowest = max(r.Slowest, o.Slowest)
}

func (r Report) clone() Report {
	r.Errors = append([]error(nil), r.Errors...)
	r.Corrupt = append([]pool.Key(nil), r.Corrupt...)
	return r
}

// Err returns nil when nothing failed, else the first error.
func (r Report) Err() error {
	if r.Failed == 0 {
		return nil
	}
	// Prefer a root cause over "the transition it waited for failed".
	first := r.Errors[0]
	for _, e := range r.Errors {
		if !errors.Is(e, errDependency) {
			first = e
			break
		}
	}
	return fmt.Errorf("%d transfers failed, first: %w", r.Failed, first)
}
