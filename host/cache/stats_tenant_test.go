package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

// Each tenant's stats count only its own pages, and the tenants' figures
// add up to the host-wide ones, per tier, for pages, pins and leases.
func TestTenantStatsCountOnlyTheTenantsPages(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.TenantPinQuota = 5
		c.TenantQuotas = map[string]int{"b": 3}
	})
	a := h.commit("a", tokens(0, 3*testPage))
	b := h.commit("b", tokens(100, 2*testPage))
	if _, err := h.ix.Pin(TargetHashes("a", a.Sequence[1]), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.ix.Pause(TargetHashes("b", b.Sequence[0]), "lb", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.settle(8) // the pause copies b's pages to disk
	h.check()

	sa, sb := h.ix.TenantStats("a"), h.ix.TenantStats("b")
	if sa.Pages != 3 || sa.PinnedPages != 2 || sa.PinQuota != 5 || sa.Leases != 0 || sa.Namespace != "a" {
		t.Fatalf("tenant a: %+v", sa)
	}
	if sb.Pages != 2 || sb.PinnedPages != 0 || sb.PinQuota != 3 || sb.Leases != 1 {
		t.Fatalf("tenant b: %+v", sb)
	}
	if sa.Tiers[tier.Device].Pages != 3 || sa.Tiers[tier.Device].Pinned != 2 || sa.Tiers[tier.Disk].Leased != 0 {
		t.Fatalf("tenant a's tiers: %+v", sa.Tiers)
	}
	if sb.Tiers[tier.Disk].Pages == 0 || sb.Tiers[tier.Disk].Leased != sb.Tiers[tier.Disk].Pages || sb.Tiers[tier.Device].Pinned != 0 {
		t.Fatalf("tenant b's tiers: %+v", sb.Tiers)
	}
	all := h.ix.Stats()
	for _, tr := range tier.All {
		got, want := sa.Tiers[tr], all.Tiers[tr]
		got.Pages += sb.Tiers[tr].Pages
		got.Pinned += sb.Tiers[tr].Pinned
		got.Leased += sb.Tiers[tr].Leased
		if got.Pages != want.Pages || got.Pinned != want.Pinned || got.Leased != want.Leased || sa.Tiers[tr].Capacity != want.Capacity {
			t.Errorf("%s: tenants add up to %+v, host-wide %+v", tr, got, want)
		}
	}
	if sa.Pages+sb.Pages != all.Pages || sa.Leases+sb.Leases != all.Leases {
		t.Errorf("pages %d+%d, host %d; leases %d+%d, host %d", sa.Pages, sb.Pages, all.Pages, sa.Leases, sb.Leases, all.Leases)
	}

	// A tenant with no pages reads as zeros, with its quota.
	if sc := h.ix.TenantStats("c"); sc.Pages != 0 || sc.PinQuota != 5 || sc.Tiers[tier.Device].Pages != 0 || sc.Tiers[tier.Device].Capacity != 16 {
		t.Fatalf("tenant c: %+v", sc)
	}
}

// Tenants mapped to one cache namespace share its pages, so each reports
// the namespace's.
func TestTenantStatsOfASharedNamespace(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Namespace = func(tenant string) string {
			if tenant == "a" || tenant == "b" {
				return "ab"
			}
			return tenant
		}
	})
	h.commit("a", tokens(0, 2*testPage))
	h.commit("b", tokens(100, 1*testPage))
	h.commit("c", tokens(200, 4*testPage))
	sa, sb, sc := h.ix.TenantStats("a"), h.ix.TenantStats("b"), h.ix.TenantStats("c")
	if sa.Namespace != "ab" || sa.Pages != 3 || sb.Pages != 3 || sa.Tiers[tier.Device].Pages != 3 {
		t.Fatalf("shared namespace: a %+v, b %+v", sa, sb)
	}
	if sc.Pages != 4 || sc.Tiers[tier.Device].Pages != 4 {
		t.Fatalf("tenant c: %+v", sc)
	}
}

func BenchmarkTenantStats(b *testing.B) {
	h := newHarness(b)
	h.commit("a", tokens(0, 12*testPage))
	h.commit("b", tokens(1000, 4*testPage))
	b.ReportAllocs()
	for b.Loop() {
		_ = h.ix.TenantStats("a")
	}
}
