package mover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
)

// errDependency: the transition waited for another that did not land.
var errDependency = errors.New("the transition it waited for did not complete")

func (m *Mover) execute(ctx context.Context, t cache.Transition, children []uint64) outcome {
	start := time.Now()
	o := outcome{t: t}
	// Children's drops go first whatever their outcome: only the order matters.
	for _, c := range children {
		m.waitAfter(ctx, c)
	}
	ok, err := m.waitAfter(ctx, t.After)
	if err == nil && !ok {
		err = errDependency
	}
	if err != nil {
		m.fail(t)
		o.err = fmt.Errorf("waiting for #%d: %w", t.After, err)
		return o
	}
	// A drop's index step may have to wait for other transitions; it does
	// no I/O, so it waits without a worker (a worker held here could be
	// the one the awaited transition needs).
	if t.Kind == cache.Drop && !m.completeDrop(ctx, t, &o) {
		o.took = time.Since(start)
		return o
	}
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		m.fail(t)
		o.err = ctx.Err()
		return o
	}
	defer func() { <-m.sem }()
	began := time.Now() // a copy's own time, without the waits above
	if t.Kind == cache.Copy {
		m.copyPage(ctx, t, &o)
	} else {
		m.freeDropped(ctx, t, &o)
	}
	o.took = time.Since(start)
	if o.err != nil {
		if f := m.o.OnFailure; f != nil {
			f(t.From, destination(t))
		}
		m.failures.note(m.log, t, o.err)
	} else if f := m.o.OnCopy; f != nil && o.bytes > 0 {
		f(t.From, t.To, o.bytes, time.Since(began))
	}
	return o
}

// fail reports a transition the mover gave up on, with others failing
// meanwhile (failgroup.go).
func (m *Mover) fail(t cache.Transition) { m.fails.fail(t) }

// reportFailed tells the index of transitions the mover gave up on.
func (m *Mover) reportFailed(ts []cache.Transition) {
	var errs []error
	m.ix.Do(func(ix *cache.Index) { errs = ix.FailTransitions(ts) })
	for i, err := range errs {
		if err != nil && !errors.Is(err, cache.ErrUnknownTransition) {
			m.log.Error("reporting a failed transition", "transition", ts[i].String(), "error", err)
		}
	}
}

// copyPage carries out one copy transition: it takes a destination, moves
// the page's bytes and reports the copy to the index (pagecopy.go).
func (m *Mover) copyPage(ctx context.Context, t cache.Transition, o *outcome) {
	c := &pageCopy{m: m, ctx: ctx, t: t, o: o, key: pool.Key{Namespace: t.Tenant, Seq: t.Seq}}
	if c.prepare() && c.transfer() {
		c.complete()
	}
}

// completeDrop applies a drop in the index and reports whether the copy
// may now be freed. ErrTransitionOrder means something the drop must
// follow has not been reported yet: a copy still reading the page, the
// copy a demotion waits for, or the drops of its children on the same
// tier (planned with it, possibly submitted in another batch). The drop
// tries again whenever any transition is reported (and on a short poll,
// for transitions reported by someone else), up to DropWait.
func (m *Mover) completeDrop(ctx context.Context, t cache.Transition, o *outcome) bool {
	deadline := time.Now().Add(m.o.DropWait)
	poll := time.Millisecond
	for {
		next := m.progressed()
		var err error
		m.ix.Do(func(ix *cache.Index) { err = ix.CompleteDrop(t) })
		switch {
		case err == nil:
			return true
		case errors.Is(err, cache.ErrUnknownTransition):
			o.err = err
			return false
		case !errors.Is(err, cache.ErrTransitionOrder):
			o.refused = true // the page became busy; the index kept it
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			m.fail(t)
			o.err = fmt.Errorf("gave up after %v: %w", m.o.DropWait, err)
			return false
		}
		timer := time.NewTimer(min(poll, left))
		select {
		case <-next:
		case <-timer.C:
			poll = min(2*poll, 50*time.Millisecond)
		case <-ctx.Done():
			timer.Stop()
			m.fail(t)
			o.err = errors.Join(err, ctx.Err())
			return false
		}
		timer.Stop()
	}
}

// freeDropped frees the copy of a drop the index accepted.
func (m *Mover) freeDropped(ctx context.Context, t cache.Transition, o *outcome) {
	// The index no longer points at the copy: free it.
	if mem := m.pools.Memory(t.From); mem != nil {
		if err := mem.Free(pool.Slot(t.FromLoc)); err != nil {
			o.err = fmt.Errorf("free %s slot %d after drop: %w", t.From, t.FromLoc, err)
		}
		return
	}
	if st := m.pools.Store(t.From); st != nil {
		key := pool.Key{Namespace: t.Tenant, Seq: t.Seq}
		if err := m.retry(ctx, func() error { return st.Delete(ctx, key) }); err != nil {
			// The index is right; the store keeps an orphan a restart
			// would bring back. Report it.
			o.err = fmt.Errorf("delete %v from %s after drop: %w", key, t.From, err)
		}
		return
	}
	o.err = fmt.Errorf("%w: %s", ErrNoPool, t.From)
}

// pageView returns the live bytes of slot s when mem keeps pages
// contiguous; ok is false when it does not (or mem is nil).
func pageView(mem pool.Memory, s pool.Slot) ([]byte, bool, error) {
	v, ok := mem.(pool.PageViewer)
	if !ok || mem == nil {
		return nil, false, nil
	}
	view, err := v.PageView(s)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return view, true, nil
}

// retry runs fn until it succeeds, fails for good, or tries run out.
func (m *Mover) retry(ctx context.Context, fn func() error) error {
	wait := m.o.RetryBackoff
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !retryable(err) || attempt >= m.o.Retries {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
		wait *= 2
	}
}

// retryable says whether a second try may succeed: not for errors that
// describe the page or the pool rather than the moment.
func retryable(err error) bool {
	for _, permanent := range []error{pool.ErrFull, pool.ErrCorrupt, pool.ErrNotFound, pool.ErrPageSize,
		pool.ErrBadSlot, pool.ErrClosed, pool.ErrKey, pool.ErrDoubleFree, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

// loseCorrupt tells the index that the source copy of t was found corrupt
// (its store has dropped it) and returns what the index forgot with it for
// the caller to free: that copy and the descendants' copies on the same
// tier, which prefix closure cannot keep.
func (m *Mover) loseCorrupt(t cache.Transition, o *outcome) []cache.Freed {
	var (
		res cache.LossResult
		err error
	)
	m.ix.Do(func(ix *cache.Index) { res, err = ix.LoseCopy(t.Tenant, t.Seq, t.From) })
	if errors.Is(err, cache.ErrUnknownBlock) || errors.Is(err, cache.ErrNotResident) {
		return nil // the copy left the index another way meanwhile
	}
	if err != nil {
		m.log.Error("forgetting a corrupt copy", "transition", t.String(), "error", err)
		return nil
	}
	o.lost = res
	level := hclog.Warn
	if res.Lost > 0 {
		level = hclog.Error // pinned, leased or locked data is gone
	}
	m.log.Log(level, "corrupt copy forgotten", "tier", t.From.String(), "tenant", t.Tenant, "seq", t.Seq,
		"copies", res.Copies, "pages_removed", res.Removed, "protected_pages_lost", res.Lost,
		"pinned", res.Pinned, "leased", res.Leased, "locked", res.Locked)
	freed := res.Freed
	o.lost.Freed = nil // the report keeps counts only
	return freed
}
