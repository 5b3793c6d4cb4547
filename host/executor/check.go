package executor

import (
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// leaseView is what check knows of a lease: whether it will exist when the
// op runs, and whose it is. It follows the turn's own Pauses and Revokes.
type leaseView struct {
	exists bool
	tenant string
}

// turnCheck is what check carries from one op to the next: the leases as
// the turn's earlier ops leave them, and the pause tier's room they claim.
type turnCheck struct {
	e          *Executor
	ix         *cache.Index
	tenant     string
	leases     map[string]*leaseView
	pauseClaim int // pages this turn's earlier pauses bring to the pause tier
}

// check is step 1: a read-only pass that resolves every op and refuses any
// op that would fail. It returns one entry per op (nil where the op is
// fine), or nil when every op is fine. ix is the index run holds.
func (e *Executor) check(ix *cache.Index, tenant string, ops []*op, st *turnState) []*errcode.Error {
	tc := &turnCheck{e: e, ix: ix, tenant: tenant} // leases made on first use
	var errs []*errcode.Error
	for i, o := range ops {
		if err := tc.op(o, st); err != nil {
			if errs == nil {
				errs = make([]*errcode.Error, len(ops))
			}
			errs[i] = err.At(i)
		}
	}
	return errs
}

// op checks one op: its span, its pages, then what its kind needs
// (kinds.go).
func (tc *turnCheck) op(o *op, st *turnState) *errcode.Error {
	if o.session != "" {
		if err := tc.checkSpan(o, st); err != nil {
			return err
		}
	}
	k := kinds[o.kind]
	if k.blocks {
		if err := tc.resolvePages(o); err != nil {
			return err
		}
	}
	if k.check != nil {
		return k.check(tc, o, st)
	}
	return nil
}

// resolvePages finds the op's cached pages, by block hashes or by tokens,
// and refuses the op when none of them is cached.
func (tc *turnCheck) resolvePages(o *op) *errcode.Error {
	ix := tc.ix
	if o.tokens != nil {
		o.seqs, o.missing, o.total = resolveTokens(ix, tc.tenant, tc.e.cfg.Salt(tc.tenant), o.tokens)
	} else {
		o.seqs, o.missing = resolve(ix, tc.tenant, o.hashes)
	}
	o.missing += o.badKeys
	if len(o.seqs) > 0 {
		return nil
	}
	n := len(o.hashes) + o.badKeys
	if o.tokens != nil {
		n = o.total
	}
	return errcode.New(errcode.UnknownBlock, "%s: none of the %d requested blocks is cached for tenant %q", o.verb, n, tc.tenant)
}

// lease returns the lease as the turn's earlier ops leave it.
func (tc *turnCheck) lease(id string) *leaseView {
	if v, ok := tc.leases[id]; ok {
		return v
	}
	v := &leaseView{}
	if li, ok := tc.ix.Lease(id); ok {
		v.exists, v.tenant = true, li.Tenant
	}
	if tc.leases == nil {
		tc.leases = map[string]*leaseView{}
	}
	tc.leases[id] = v
	return v
}

// ownLease refuses a lease that will not exist, or is another tenant's.
func (tc *turnCheck) ownLease(id string) (*leaseView, *errcode.Error) {
	v := tc.lease(id)
	switch {
	case !v.exists:
		return nil, errcode.New(errcode.UnknownLease, "lease %q", id)
	case v.tenant != tc.tenant:
		return nil, errcode.New(errcode.TenantMismatch, "lease %q belongs to another tenant", id)
	}
	return v, nil
}

func (tc *turnCheck) present(t tier.Tier) bool {
	return tc.e.cfg.Index.Config().Tiers[t].Capacity > 0
}

func (tc *turnCheck) resume(o *op) *errcode.Error {
	v, err := tc.ownLease(o.lease)
	if err != nil {
		return err
	}
	if tc.e.att().Transitions == nil {
		return errcode.New(errcode.Unavailable, "Resume: no mover is attached to load the lease back")
	}
	v.exists = false
	return nil
}

func (tc *turnCheck) warm(o *op) *errcode.Error {
	t, err := tier.Parse(o.tierName)
	o.to = t
	switch {
	case err != nil:
		return errcode.Wrap(errcode.InvalidTier, err, "")
	case !tc.present(t):
		return errcode.New(errcode.InvalidTier, "tier %s is not configured on this host", t)
	case tc.e.att().Transitions == nil:
		return errcode.New(errcode.Unavailable, "Warm: no mover is attached to carry out copies")
	}
	return nil
}

func (tc *turnCheck) pause(o *op) *errcode.Error {
	e := tc.e
	v := tc.lease(o.lease)
	switch {
	case v.exists:
		return errcode.New(errcode.LeaseExists, "lease %q", o.lease)
	case !tc.present(e.cfg.PauseTier):
		return errcode.New(errcode.Unavailable, "pause tier %s is not configured on this host", e.cfg.PauseTier)
	}
	// Refused here, whole and at once, when the pause tier cannot take the
	// pages: an "ok" whose copies then fail in the background left a
	// worker's device full of leased pages.
	need, err := tc.ix.PauseRoom(o.target(tc.tenant), e.cfg.PauseTier, tc.pauseClaim)
	if err != nil {
		return fromCache(err)
	}
	tc.pauseClaim += need
	if o.ttl == nil {
		o.ttlD = e.cfg.LeaseTTL.Max // an indefinite lease, within the operator's clamp
	} else {
		o.ttlD = e.cfg.LeaseTTL.Resolve(o.ttlOr0())
	}
	v.exists, v.tenant = true, tc.tenant
	return nil
}

// leaseChange checks RenewLease and RevokeLease.
func (tc *turnCheck) leaseChange(o *op) *errcode.Error {
	v, err := tc.ownLease(o.lease)
	if err != nil {
		return err
	}
	o.ttlD = tc.e.cfg.LeaseTTL.Resolve(o.ttlOr0())
	if o.kind == opRevoke {
		v.exists = false
	}
	return nil
}

func (o *op) ttlOr0() time.Duration {
	if o.ttl == nil {
		return 0
	}
	return o.ttl.Duration()
}

// interiorPurge returns the purge's transient pages that have children
// outside the purge: their purge is executed as a splice with an
// empty replacement (checkThinkSplice). Children inside the purge go first
// (deepest first), so a transient tail is purged whole without a splice.
func interiorPurge(ix *cache.Index, tenant string, o *op) []uint64 {
	inPurge := make(map[uint64]int, len(o.seqs)) // seq -> children of it in the purge
	for _, s := range o.seqs {
		inPurge[s] += 0
	}
	for _, s := range o.seqs {
		if p, ok := ix.Lookup(tenant, s); ok && p.HasParent {
			if _, in := inPurge[p.Parent]; in {
				inPurge[p.Parent]++
			}
		}
	}
	var interior []uint64
	for _, s := range o.seqs {
		p, ok := ix.Lookup(tenant, s)
		if ok && p.Transient && p.Children > inPurge[s] {
			interior = append(interior, s)
		}
	}
	return interior
}
