package cache

import "github.com/kvpilot/kvpilot/host/tier"

// TenantStats is Stats restricted to one tenant's pages, for a caller that
// may see only its own tenant (the Control service's tenant-scoped Stats).
// Tenants that share a cache namespace share its pages, so each of them
// reports the namespace's figures.
type TenantStats struct {
	// Tenant is the tenant asked about; Namespace is the cache namespace
	// its pages live in.
	Tenant, Namespace string
	// Tiers count the tenant's resident, pinned and leased pages per tier
	// (as Stats does host-wide); Capacity stays the tier's, since tiers are
	// shared. Pending and reserved slots are not the tenant's to see: a
	// slot carries no tenant until it is committed.
	Tiers [tier.Count]TierStats
	// Pages counts the tenant's pages (each once, whatever its tiers).
	Pages int
	// PinnedPages counts its distinct pages with a positive pin count;
	// PinQuota is its pin quota in pages (0: none).
	PinnedPages int
	PinQuota    int
	// Leases counts live leases the tenant holds.
	Leases int
}

// TenantStats returns tenant's snapshot. A tenant with no pages reads as
// zeros with its quota. It costs O(the tenant's pages + leases).
func (ix *Index) TenantStats(tenant string) TenantStats {
	ns := ix.Namespace(tenant)
	s := TenantStats{Tenant: tenant, Namespace: ns, PinQuota: ix.cfg.TenantPinQuota}
	if q, ok := ix.cfg.TenantQuotas[ns]; ok {
		s.PinQuota = q
	}
	for _, t := range tier.All {
		s.Tiers[t] = TierStats{Tier: t, Capacity: ix.cfg.Tiers[t].Capacity}
	}
	for _, l := range ix.leases {
		if ix.Namespace(l.tenant) == ns {
			s.Leases++
		}
	}
	ts := ix.tenant(tenant)
	if ts == nil {
		return s
	}
	s.PinQuota = ts.quota
	s.Pages = len(ts.bySeq)
	s.PinnedPages = ts.pinned
	for _, n := range ts.bySeq {
		if n.dead {
			continue
		}
		pinned, leased := n.pinCount > 0, n.r().leaseRefs > 0
		for _, t := range tier.All {
			if !n.resident.Has(t) {
				continue
			}
			st := &s.Tiers[t]
			st.Pages++
			if pinned {
				st.Pinned++
			}
			if leased {
				st.Leased++
			}
		}
	}
	return s
}
