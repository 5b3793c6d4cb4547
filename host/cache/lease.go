package cache

import (
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// lease is a pause record: the pages it holds (root first), the tier they
// are paused to, and when it lapses.
type lease struct {
	id     string
	tenant string
	tier   tier.Tier
	expiry time.Duration
	pages  []*node
	// settled is set by Plan once every page sits on the pause tier with no
	// hotter copy, so later plans skip the lease.
	settled bool
	// failures counts attempts in a row that could not move the pages
	// (lease_health.go); Plan leaves the lease alone until retryAt. A
	// degraded lease no longer holds its pages; reason says why.
	failures int
	retryAt  time.Duration
	degraded bool
	reason   string
}

// LeaseInfo describes a lease.
type LeaseInfo struct {
	ID     string
	Tenant string
	Tier   tier.Tier
	Expiry time.Duration
	// Pages counts the lease's pages still in the index.
	Pages int
	// Seqs lists their sequence hashes, root first.
	Seqs []uint64
	// Settled is true once every page is on the pause tier alone.
	Settled bool
	// Degraded is true when the pages could not be moved to the pause
	// tier (Reason says why): they are ordinary evictable pages until the
	// lease settles on a later attempt.
	Degraded bool
	Reason   string
}

func (l *lease) info() LeaseInfo {
	li := LeaseInfo{ID: l.id, Tenant: l.tenant, Tier: l.tier, Expiry: l.expiry, Settled: l.settled, Degraded: l.degraded, Reason: l.reason}
	for _, n := range l.pages {
		if !n.dead {
			li.Pages++
			li.Seqs = append(li.Seqs, n.seq)
		}
	}
	return li
}

// Pause records a lease on the target pages and their ancestors: Plan will
// copy them to the pause tier (a colder tier: host, disk or remote) and
// then free their hotter copies, and eviction skips them until the lease
// ends. An empty id gets a generated one. Leases must be persisted by the
// caller (Leases lists them) and restored with Pause after a restart.
func (ix *Index) Pause(t Target, id string, pauseTier tier.Tier, ttl time.Duration) (LeaseInfo, Result, error) {
	switch {
	case ttl <= 0:
		return LeaseInfo{}, Result{}, fmt.Errorf("pause %s: ttl %v must be positive: %w", t, ttl, ErrBadTTL)
	case !pauseTier.Valid() || pauseTier == tier.Device:
		return LeaseInfo{}, Result{}, fmt.Errorf("pause %s: pause tier %s must be host, disk or remote: %w", t, pauseTier, ErrBadArgument)
	case !ix.present(pauseTier):
		return LeaseInfo{}, Result{}, fmt.Errorf("pause %s: pause tier %s has no capacity: %w", t, pauseTier, ErrBadArgument)
	}
	if id != "" && ix.leases[id] != nil {
		return LeaseInfo{}, Result{}, fmt.Errorf("pause %s: lease %q: %w", t, id, ErrLeaseExists)
	}
	nodes, unknown := ix.resolve(t)
	res := Result{Unknown: unknown}
	if len(nodes) == 0 {
		return LeaseInfo{}, res, unknownErr("pause", t, unknown)
	}
	if _, err := ix.PauseRoom(t, pauseTier, 0); err != nil {
		return LeaseInfo{}, res, err
	}
	if id == "" {
		for {
			ix.leaseSeq++
			id = fmt.Sprintf("lease-%d", ix.leaseSeq)
			if ix.leases[id] == nil {
				break
			}
		}
	}
	pages := ix.closureOf(nodes)
	l := &lease{id: id, tenant: t.Tenant, tier: pauseTier, expiry: ix.clock.Now() + ttl,
		pages: append([]*node(nil), pages...)}
	for _, n := range l.pages {
		n.w().leaseRefs++
		n.w().lease = l
	}
	ix.leases[id] = l
	ix.leaseOrder = append(ix.leaseOrder, l)
	res.Pages = len(l.pages)
	ix.afterMutation()
	return l.info(), res, nil
}

// RenewLease extends a lease to max(expiry, now+ttl).
func (ix *Index) RenewLease(id string, ttl time.Duration) (LeaseInfo, error) {
	if ttl <= 0 {
		return LeaseInfo{}, fmt.Errorf("renew lease %q: ttl %v must be positive: %w", id, ttl, ErrBadTTL)
	}
	l, err := ix.liveLease("renew", id)
	if err != nil {
		return LeaseInfo{}, err
	}
	l.expiry = max(l.expiry, ix.clock.Now()+ttl)
	return l.info(), nil
}

// RevokeLease ends a lease and purges its pages from every tier at once,
// deepest first. Pages the lease does not hold alone stay as ordinary
// pages: those locked, pinned or held by another lease (counted), and
// those with children outside the lease (counted in Kept), so a shared
// prefix survives its sessions.
func (ix *Index) RevokeLease(id string) (PurgeResult, error) {
	l, err := ix.liveLease("revoke", id)
	if err != nil {
		return PurgeResult{}, err
	}
	ix.endLease(l)
	var res PurgeResult
	now := ix.clock.Now()
	for i := len(l.pages) - 1; i >= 0; i-- {
		n := l.pages[i]
		switch {
		case n.dead:
		case n.lockRef > 0:
			res.Locked++
		case n.pinned(now):
			res.Pinned++
		case n.r().leaseRefs > 0:
			res.Leased++
		case n.nchildren > 0:
			res.Kept++
		default:
			res.Freed = ix.purgeEverywhere(n, res.Freed)
			res.Removed++
		}
	}
	ix.afterMutation()
	return res, nil
}

// Lease returns a live lease.
func (ix *Index) Lease(id string) (LeaseInfo, bool) {
	l := ix.leases[id]
	if l == nil {
		return LeaseInfo{}, false
	}
	return l.info(), true
}

// Leases lists live leases in creation order.
func (ix *Index) Leases() []LeaseInfo {
	out := make([]LeaseInfo, 0, len(ix.leaseOrder))
	for _, l := range ix.leaseOrder {
		out = append(out, l.info())
	}
	return out
}

func (ix *Index) liveLease(op, id string) (*lease, error) {
	l := ix.leases[id]
	if l == nil {
		return nil, fmt.Errorf("%s lease %q: %w", op, id, ErrUnknownLease)
	}
	return l, nil
}

// endLease forgets a lease; its pages become ordinary unless another
// lease holds them.
func (ix *Index) endLease(l *lease) {
	ix.undegrade(l)
	delete(ix.leases, l.id)
	for i, o := range ix.leaseOrder {
		if o == l {
			ix.leaseOrder = append(ix.leaseOrder[:i], ix.leaseOrder[i+1:]...)
			break
		}
	}
	for _, n := range l.pages {
		if n.dead {
			continue
		}
		n.w().leaseRefs--
		if n.r().lease == l {
			n.w().lease = nil
		}
		n.tidy()
	}
}
