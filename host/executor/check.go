package executor

import (
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// leaseView is what check knows of a lease: whether it will exist when the
// op runs, and whose it is. It follows the turn's own Pauses and Revokes.
type leaseView struct {
	exists bool
	tenant string
}

// check is step 1: a read-only pass that resolves every op and refuses any
// op that would fail. It returns one entry per op (nil where the op is
// fine), or nil when every op is fine. Caller holds the lock.
func (e *Executor) check(tenant string, ops []*op, st *turnState) []*errcode.Error {
	ix := e.cfg.Index
	var errs []*errcode.Error
	fail := func(i int, err *errcode.Error) {
		if errs == nil {
			errs = make([]*errcode.Error, len(ops))
		}
		errs[i] = err.At(i)
	}
	leases := map[string]*leaseView{}
	leaseOf := func(id string) *leaseView {
		if v, ok := leases[id]; ok {
			return v
		}
		v := &leaseView{}
		if li, ok := ix.Lease(id); ok {
			v.exists, v.tenant = true, li.Tenant
		}
		leases[id] = v
		return v
	}
	present := func(t tier.Tier) bool { return ix.Config().Tiers[t].Capacity > 0 }
	pauseClaim := 0 // pages this turn's earlier pauses bring to the pause tier

	for i, o := range ops {
		if o.session != "" {
			if err := e.checkSpan(tenant, o, st); err != nil {
				fail(i, err)
				continue
			}
		}
		switch o.kind {
		case opUnsupported:
			fail(i, o.unsupported())
			continue
		case opPin, opUnpin, opMark, opPurge, opPrune, opWarm, opPause:
			if o.tokens != nil {
				o.seqs, o.missing, o.total = resolveTokens(ix, tenant, e.cfg.Salt(tenant), o.tokens)
			} else {
				o.seqs, o.missing = resolve(ix, tenant, o.hashes)
			}
			o.missing += o.badKeys
			if len(o.seqs) == 0 {
				n := len(o.hashes) + o.badKeys
				if o.tokens != nil {
					n = o.total
				}
				fail(i, errcode.New(errcode.UnknownBlock, "%s: none of the %d requested blocks is cached for tenant %q", o.verb, n, tenant))
				continue
			}
		}
		switch o.kind {
		case opPin:
			o.ttlD = e.cfg.PinTTL.Resolve(o.ttlOr0())
		case opPurge:
			if interior := e.interiorPurge(tenant, o); len(interior) > 0 {
				if err := e.checkThinkSplice(tenant, o, interior, st); err != nil {
					fail(i, err)
				}
			}
		case opResume:
			v := leaseOf(o.lease)
			switch {
			case !v.exists:
				fail(i, errcode.New(errcode.UnknownLease, "lease %q", o.lease))
			case v.tenant != tenant:
				fail(i, errcode.New(errcode.TenantMismatch, "lease %q belongs to another tenant", o.lease))
			case e.att().Transitions == nil:
				fail(i, errcode.New(errcode.Unavailable, "Resume: no mover is attached to load the lease back"))
			default:
				v.exists = false
			}
		case opWarm:
			t, err := tier.Parse(o.tierName)
			switch {
			case err != nil:
				fail(i, errcode.Wrap(errcode.InvalidTier, err, ""))
			case !present(t):
				fail(i, errcode.New(errcode.InvalidTier, "tier %s is not configured on this host", t))
			case e.att().Transitions == nil:
				fail(i, errcode.New(errcode.Unavailable, "Warm: no mover is attached to carry out copies"))
			}
			o.to = t
		case opPause:
			v := leaseOf(o.lease)
			switch {
			case v.exists:
				fail(i, errcode.New(errcode.LeaseExists, "lease %q", o.lease))
				continue
			case !present(e.cfg.PauseTier):
				fail(i, errcode.New(errcode.Unavailable, "pause tier %s is not configured on this host", e.cfg.PauseTier))
				continue
			}
			// Refused here, whole and at once, when the pause tier cannot
			// take the pages: an "ok" whose copies then fail in the
			// background left a worker's device full of leased pages.
			need, err := ix.PauseRoom(o.target(tenant), e.cfg.PauseTier, pauseClaim)
			if err != nil {
				fail(i, fromCache(err))
				continue
			}
			pauseClaim += need
			if o.ttl == nil {
				o.ttlD = e.cfg.LeaseTTL.Max // an indefinite lease, within the operator's clamp
			} else {
				o.ttlD = e.cfg.LeaseTTL.Resolve(o.ttlOr0())
			}
			v.exists, v.tenant = true, tenant
		case opRenew, opRevoke:
			v := leaseOf(o.lease)
			switch {
			case !v.exists:
				fail(i, errcode.New(errcode.UnknownLease, "lease %q", o.lease))
				continue
			case v.tenant != tenant:
				fail(i, errcode.New(errcode.TenantMismatch, "lease %q belongs to another tenant", o.lease))
				continue
			}
			o.ttlD = e.cfg.LeaseTTL.Resolve(o.ttlOr0())
			if o.kind == opRevoke {
				v.exists = false
			}
		}
	}
	return errs
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
func (e *Executor) interiorPurge(tenant string, o *op) []uint64 {
	ix := e.cfg.Index
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
