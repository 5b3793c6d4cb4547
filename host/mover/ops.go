package mover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Step plans with the index (write-through copies of committed pages,
// pause work, eviction with write-back) and runs the plan to its fence.
// The host calls it after commits and on a timer.
func (m *Mover) Step(ctx context.Context) Report {
	var ts []cache.Transition
	m.ix.Do(func(ix *cache.Index) { ts = ix.Plan(ix.Config().Clock.Now(), nil) })
	if len(ts) == 0 {
		return Report{}
	}
	return m.Run(ctx, ts)
}

// LoadBack brings a matched path onto the device tier before deadline,
// all or nothing: it returns ErrIncomplete unless every page of the target
// is on the device when it returns. Pages that did land stay there (they
// are valid copies); the caller then serves the prefix up to the first
// missing page, or re-prefills.
func (m *Mover) LoadBack(ctx context.Context, target cache.Target, deadline time.Time) (Report, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return m.fetch(ctx, target, tier.Device, "load back")
}

// Warm copies the target pages (and their ancestors) from colder tiers
// into tier to (host or device). It reports ErrIncomplete when some could
// not be brought.
func (m *Mover) Warm(ctx context.Context, target cache.Target, to tier.Tier) (Report, error) {
	return m.fetch(ctx, target, to, "warm")
}

// alreadyWait bounds how long a fetch waits for copies another fetch has
// under way, when its context has no earlier deadline.
const alreadyWait = 5 * time.Second

func (m *Mover) fetch(ctx context.Context, target cache.Target, to tier.Tier, op string) (Report, error) {
	var (
		ts  []cache.Transition
		res cache.FetchResult
		err error
	)
	m.ix.Do(func(ix *cache.Index) { ts, res, err = ix.PlanFetch(target, to, nil) })
	if err != nil {
		return Report{}, fmt.Errorf("%s %s to %s: %w", op, target, to, err)
	}
	m.makeRoom(ctx, ts, to)
	r := m.Run(ctx, ts)
	// Pages already under way to the tier (by another fetch: a Resume's or
	// a Warm's load, a concurrent Match) count as there only once they
	// are: wait for them within ctx (at most alreadyWait), re-planning
	// each round so a copy that failed elsewhere is planned again here.
	// Without this a Match right after a Resume served a partial prefix.
	missing := m.missing(target, to)
	waitUntil := time.Now().Add(alreadyWait)
	for missing > 0 && res.Already > 0 && r.Failed == 0 && res.Skipped == 0 && time.Now().Before(waitUntil) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
		m.ix.Do(func(ix *cache.Index) { ts, res, err = ix.PlanFetch(target, to, nil) })
		if err != nil {
			return r, fmt.Errorf("%s %s to %s: %w", op, target, to, err)
		}
		if len(ts) > 0 {
			r.Merge(m.Run(ctx, ts))
		}
		missing = m.missing(target, to)
	}
	if r.Failed > 0 || missing > 0 || res.Skipped > 0 {
		return r, fmt.Errorf("%s %s to %s: %d of %d planned copies failed, %d pages skipped, %d pages not on %s: %w",
			op, target, to, r.Failed, res.Planned, res.Skipped, missing, to, errors.Join(ErrIncomplete, r.Err()))
	}
	return r, nil
}

// missing counts target pages (hash targets only) not resident on to.
func (m *Mover) missing(target cache.Target, to tier.Tier) int {
	n := 0
	m.ix.Do(func(ix *cache.Index) {
		for _, h := range target.Hashes {
			if pi, ok := ix.Lookup(target.Tenant, h); !ok || !pi.Tiers.Has(to) {
				n++
			}
		}
	})
	return n
}

// Pause leases the target pages to pauseTier and runs plans until the
// lease is settled (every page on the pause tier alone) or ctx ends. The
// lease stays recorded either way; an unsettled one is finished by later
// Steps.
func (m *Mover) Pause(ctx context.Context, target cache.Target, id string, pauseTier tier.Tier, ttl time.Duration) (cache.LeaseInfo, Report, error) {
	var (
		li  cache.LeaseInfo
		err error
	)
	m.ix.Do(func(ix *cache.Index) { li, _, err = ix.Pause(target, id, pauseTier, ttl) })
	if err != nil {
		return li, Report{}, fmt.Errorf("pause: %w", err)
	}
	var total Report
	// Each round lands copies, after which the drops of hotter copies can
	// be planned; a path settles within a few rounds. A round that finds
	// nothing to do means another caller's Step holds the work: wait for
	// it, up to maxIdle rounds in a row.
	const maxIdle = 200
	idle, wait := 0, time.Millisecond
	for idle < maxIdle {
		r := m.Step(ctx)
		total.Merge(r)
		var ok bool
		m.ix.Do(func(ix *cache.Index) { li, ok = ix.Lease(li.ID) })
		if !ok {
			return li, total, fmt.Errorf("pause: lease %s ended while pausing", li.ID)
		}
		if li.Settled {
			return li, total, nil
		}
		if ctx.Err() != nil {
			break
		}
		if r.Copied+r.Dropped > 0 {
			idle, wait = 0, time.Millisecond
			continue
		}
		if r.Failed > 0 {
			break // failing without progress: later Steps will retry
		}
		idle++
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
	return li, total, fmt.Errorf("pause: lease %s not settled: %w", li.ID, errors.Join(ErrIncomplete, total.Err(), ctx.Err()))
}

// Resume brings a lease's pages back to tier to (device, to serve the
// returning session). The lease itself is left to the caller to renew or
// let lapse.
func (m *Mover) Resume(ctx context.Context, leaseID string, to tier.Tier) (Report, error) {
	var (
		li cache.LeaseInfo
		ok bool
	)
	m.ix.Do(func(ix *cache.Index) { li, ok = ix.Lease(leaseID) })
	if !ok {
		return Report{}, fmt.Errorf("resume lease %q: %w", leaseID, cache.ErrUnknownLease)
	}
	return m.fetch(ctx, cache.TargetHashes(li.Tenant, li.Seqs...), to, "resume")
}

// Release frees the pool copies the index removed on its own authority
// (prune, purge, revoke), as listed in a PurgeResult's Freed, or forgot as
// lost (a LossResult's Freed).
func (m *Mover) Release(ctx context.Context, freed []cache.Freed) error {
	var errs []error
	for _, f := range freed {
		if mem := m.pools.Memory(f.Tier); mem != nil {
			errs = append(errs, mem.Free(pool.Slot(f.Loc)))
			continue
		}
		if st := m.pools.Store(f.Tier); st != nil {
			key := pool.Key{Namespace: f.Tenant, Seq: f.Seq}
			errs = append(errs, m.retry(ctx, func() error { return st.Delete(ctx, key) }))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release freed pages: %w", err)
	}
	return nil
}
