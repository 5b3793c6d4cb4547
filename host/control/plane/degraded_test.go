package plane

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// A lease whose copies keep failing is reported degraded by Stats, with
// the reason, host-wide and to its tenant.
func TestStatsReportDegradedLeases(t *testing.T) {
	e := newEnv(t)
	h := e.commit("acme", toks(0, 2*pageSize))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := e.uds.Apply(ctx, directive.Turn{Tenant: "acme", Directives: []directive.Directive{
		directive.Pause{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[1])}, LeaseID: "L"}}})
	if err != nil || !r.OK() {
		t.Fatalf("pause: %+v %v", r, err)
	}
	// The mover's copies fail, attempt after attempt.
	for deadline := time.Now().Add(5 * time.Second); ; {
		var li cache.LeaseInfo
		e.g.Do(func(ix *cache.Index) {
			for _, tr := range ix.Plan(ix.Config().Clock.Now(), nil) {
				if err := ix.FailTransition(tr); err != nil {
					t.Fatal(err)
				}
			}
			li, _ = ix.Lease("L")
		})
		if li.Degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease never degraded: %+v", li)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A host with a degraded lease still answers Ping.
	if id, err := e.uds.Ping(ctx); err != nil || id == "" {
		t.Fatalf("Ping: %q %v", id, err)
	}
	for _, tenant := range []string{"", "acme"} {
		st, err := e.uds.TenantStats(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.DegradedLeases) != 1 || st.DegradedLeases[0].LeaseID != "L" || !strings.Contains(st.DegradedLeases[0].Reason, "disk") {
			t.Fatalf("stats for %q: degraded leases %+v", tenant, st.DegradedLeases)
		}
	}
	if st, err := e.uds.TenantStats(ctx, "other"); err != nil || len(st.DegradedLeases) != 0 {
		t.Fatalf("another tenant's stats show the lease: %+v %v", st.DegradedLeases, err)
	}
}
