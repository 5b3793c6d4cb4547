package executor

import (
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

// turnCheck is what check carries from one op to the next: the index the
// turn holds, the attachments the turn runs with, the leases as the turn's
// earlier ops leave them, and the pause tier's room they claim.
type turnCheck struct {
	e          *Executor
	ix         *cache.Index
	att        *Attachments
	tenant     string
	leases     map[string]*leaseView
	pauseClaim int // pages this turn's earlier pauses bring to the pause tier
}

// check is step 1: a read-only pass that resolves every op and refuses any
// op that would fail (each kind's check, kinds.go). It returns one entry
// per op (nil where the op is fine), or nil when every op is fine.
func (t *turn) check(ix *cache.Index) []*errcode.Error {
	tc := &turnCheck{e: t.e, ix: ix, att: t.att, tenant: t.tenant} // leases made on first use
	var errs []*errcode.Error
	for i, o := range t.ops {
		if err := o.check(tc, &t.st); err != nil {
			if errs == nil {
				errs = make([]*errcode.Error, len(t.ops))
			}
			errs[i] = err.At(i)
		}
	}
	return errs
}

// resolvePages finds the op's cached pages, by block hashes or by tokens,
// and refuses the op when none of them is cached.
func (tc *turnCheck) resolvePages(b *opBase, p *pages) *errcode.Error {
	if p.tokens != nil {
		p.seqs, p.missing, p.total = resolveTokens(tc.ix, tc.tenant, tc.e.cfg.Salt(tc.tenant), p.tokens)
	} else {
		p.seqs, p.missing = resolve(tc.ix, tc.tenant, p.hashes)
	}
	p.missing += p.badKeys
	b.eff.Missing = p.missing
	if len(p.seqs) > 0 {
		return nil
	}
	n := len(p.hashes) + p.badKeys
	if p.tokens != nil {
		n = p.total
	}
	return errcode.New(errcode.UnknownBlock, "%s: none of the %d requested blocks is cached for tenant %q", b.verb, n, tc.tenant)
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

// interiorPurge returns the purge's transient pages that have children
// outside the purge: their purge is executed as a splice with an
// empty replacement (checkThinkSplice). Children inside the purge go first
// (deepest first), so a transient tail is purged whole without a splice.
func interiorPurge(ix *cache.Index, tenant string, seqs []uint64) []uint64 {
	inPurge := make(map[uint64]int, len(seqs)) // seq -> children of it in the purge
	for _, s := range seqs {
		inPurge[s] += 0
	}
	for _, s := range seqs {
		if p, ok := ix.Lookup(tenant, s); ok && p.HasParent {
			if _, in := inPurge[p.Parent]; in {
				inPurge[p.Parent]++
			}
		}
	}
	var interior []uint64
	for _, s := range seqs {
		p, ok := ix.Lookup(tenant, s)
		if ok && p.Transient && p.Children > inPurge[s] {
			interior = append(interior, s)
		}
	}
	return interior
}
