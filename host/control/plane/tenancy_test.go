package plane

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// These tests call as this process's own uid over the real socket: the
// host reads it with SO_PEERCRED, so binding that uid (0 under the test
// runner, or whoever runs the tests) is binding a real peer. The daemon's
// tenancy test adds a second uid.

func bindTenants(tenants map[string][]string) func(*Config) {
	return func(c *Config) { c.ControlTenants = config.Control{Tenants: tenants}.TenantsOf }
}

func selfUID() string { return strconv.Itoa(os.Getuid()) }

// A uid bound to tenant a acts for a, and is refused for b with
// permission_denied on Apply, CacheControl, Stats and WatchEvents: b's
// pages stay exactly as they were, the refusals are audited, and the
// message names the uid, the tenant and the key that grants it.
func TestBoundUIDActsOnlyForItsTenant(t *testing.T) {
	e := newEnv(t, bindTenants(map[string][]string{selfUID(): {"a"}}))
	a := e.commit("a", toks(0, 8)).Sequence
	b := e.commit("b", toks(100, 8)).Sequence
	before := e.snapshot("b", b...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r := apply(t, e.uds, "b", directive.Cache{BlockHashes: hs(b[1]), Pin: true}, directive.Prune{AfterBlockHash: directive.Hash(b[0])})
	refused(t, r, -1, errcode.PermissionDenied)
	for _, want := range []string{"uid " + selfUID(), `tenant "b"`, "control.tenants." + selfUID()} {
		if !strings.Contains(r.Error.Detail, want) {
			t.Fatalf("refusal %q does not name %q", r.Error.Detail, want)
		}
	}
	if r.Results[0].Error == nil || r.Results[0].Error.Code != errcode.PermissionDenied || r.Results[1].Verb != directive.VerbPrune {
		t.Fatalf("per-directive results: %+v", r.Results)
	}
	cc, err := e.uds.CacheControl(ctx, directive.CacheControl{Action: directive.ActionEvictDescendants, BlockHashes: hs(b[0])}, "b")
	if err != nil || cc.Status != directive.StatusError || cc.Code != errcode.PermissionDenied {
		t.Fatalf("cache_control for b: %+v %v", cc, err)
	}
	if _, err := e.uds.TenantStats(ctx, "b"); !errcodeIs(err, errcode.PermissionDenied) {
		t.Fatalf("stats for b: %v", err)
	}
	werr := e.uds.Watch(ctx, controlclient.WatchOptions{Tenant: "b", Ready: func() { t.Error("a refused watch became ready") }},
		func(controlclient.Event) error { return nil })
	if !errcodeIs(werr, errcode.PermissionDenied) || !strings.Contains(werr.Error(), `tenant "b"`) {
		t.Fatalf("watch of b: %v", werr)
	}
	if after := e.snapshot("b", b...); after != before {
		t.Fatalf("refused calls changed tenant b:\n%s\n%s", before, after)
	}
	var audited []string
	for _, rec := range e.ring.Records() {
		if rec.Code == errcode.PermissionDenied {
			if rec.Tenant != "b" || !strings.HasPrefix(rec.Source, "uds:uid="+selfUID()) {
				t.Fatalf("audit record %+v", rec)
			}
			audited = append(audited, rec.Verb)
		}
	}
	if strings.Join(audited, ",") != "turn,evict_descendants" {
		t.Fatalf("audited refusals %v, want the turn and the cache_control request", audited)
	}

	// For its own tenant the same uid is served on every call.
	ok(t, apply(t, e.uds, "a", directive.Cache{BlockHashes: hs(a[1]), Pin: true}))
	cc, err = e.uds.CacheControl(ctx, directive.CacheControl{Action: directive.ActionUnpinBlocks, BlockHashes: hs(a[1])}, "a")
	if err != nil || cc.Status != directive.StatusOK {
		t.Fatalf("cache_control for a: %+v %v", cc, err)
	}
	// Bound to exactly one tenant, Stats without a tenant is that one's,
	// and so is a watch that names none.
	s, err := e.uds.Stats(ctx)
	if err != nil || s.Tenant != "a" || s.TenantPages != 2 || s.Tiers[0].Pages != 2 {
		t.Fatalf("default stats of a uid bound to a: %+v %v", s, err)
	}
	col, _ := watch(t, e.uds, controlclient.WatchOptions{})
	e.commit("b", toks(200, 4))
	last := e.commit("a", toks(300, 4)).Sequence[0]
	waitFor(t, "a's store", func() bool {
		for _, ev := range col.events() {
			if st := ev.Event.Data.Stored; st != nil && st.Blocks[0].BlockHash == last {
				return true
			}
		}
		return false
	})
	for _, ev := range col.events() {
		if st := ev.Event.Data.Stored; st != nil && st.Blocks[0].BlockHash != last {
			t.Fatalf("the watch of a uid bound to a saw another tenant's store: %+v", ev)
		}
	}
}

// "*" lets a uid act for any tenant and see host-wide figures; once any
// uid is listed, an unlisted one acts for none; a uid bound to several
// tenants must name one for Stats and WatchEvents.
func TestTenantWildcardAndUnlistedUID(t *testing.T) {
	t.Run("wildcard", func(t *testing.T) {
		e := newEnv(t, bindTenants(map[string][]string{selfUID(): {config.TenantWildcard}}))
		b := e.commit("b", toks(100, 8)).Sequence
		e.commit("c", toks(200, 4))
		ok(t, apply(t, e.uds, "b", directive.Cache{BlockHashes: hs(b[1]), Pin: true}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := e.uds.Stats(ctx)
		if err != nil || s.Tenant != "" || s.Tiers[0].Pages != 3 {
			t.Fatalf("host-wide stats for the wildcard uid: %+v %v", s, err)
		}
		watch(t, e.uds, controlclient.WatchOptions{})
	})
	t.Run("unlisted", func(t *testing.T) {
		e := newEnv(t, bindTenants(map[string][]string{"4243": {"a"}}))
		a := e.commit("a", toks(0, 8)).Sequence
		before := e.snapshot("a", a...)
		r := apply(t, e.uds, "a", directive.Cache{BlockHashes: hs(a[1]), Pin: true})
		refused(t, r, -1, errcode.PermissionDenied)
		if !strings.Contains(r.Error.Detail, "does not list uid "+selfUID()) {
			t.Fatalf("refusal of an unlisted uid: %q", r.Error.Detail)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.uds.Stats(ctx); !errcodeIs(err, errcode.PermissionDenied) {
			t.Fatalf("stats of an unlisted uid: %v", err)
		}
		if got := e.snapshot("a", a...); got != before {
			t.Fatal("an unlisted uid changed the index")
		}
		// NATS is not the socket: its sources are not uids, and the
		// binding does not apply there.
		ok(t, apply(t, e.nc, "a", directive.Cache{BlockHashes: hs(a[1]), Pin: true}))
	})
	t.Run("several", func(t *testing.T) {
		e := newEnv(t, bindTenants(map[string][]string{selfUID(): {"a", "b"}}))
		e.commit("b", toks(100, 8))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.uds.Stats(ctx); !errcodeIs(err, errcode.PermissionDenied) || !strings.Contains(err.Error(), "must name one") {
			t.Fatalf("stats without a tenant: %v", err)
		}
		if err := e.uds.Watch(ctx, controlclient.WatchOptions{}, func(controlclient.Event) error { return nil }); !errcodeIs(err, errcode.PermissionDenied) {
			t.Fatalf("watch without a tenant: %v", err)
		}
		if s, err := e.uds.TenantStats(ctx, "b"); err != nil || s.Tenant != "b" || s.TenantPages != 2 {
			t.Fatalf("stats for b: %+v %v", s, err)
		}
	})
}

// Stats for a tenant counts only that tenant's pages, pins and leases;
// capacity stays the tier's. Without a tenant an unbound caller gets the
// host-wide figures.
func TestStatsForOneTenant(t *testing.T) {
	e := newEnv(t)
	a := e.commit("a", toks(0, 8)).Sequence
	b := e.commit("b", toks(100, 12)).Sequence
	ok(t, apply(t, e.uds, "a", directive.Cache{BlockHashes: hs(a[1]), Pin: true}))
	ok(t, apply(t, e.uds, "b", directive.Pause{BlockHashes: hs(b[2]), LeaseID: "lb", TTL: directive.TTLOf(time.Hour)}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := e.uds.Stats(ctx)
	if err != nil || all.Tenant != "" || all.Tiers[0].Pages != 5 || all.Leases != 1 {
		t.Fatalf("host-wide: %+v %v", all, err)
	}
	sa, err := e.uds.TenantStats(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if sa.Tenant != "a" || sa.TenantPages != 2 || sa.TenantPinnedPages != 2 || sa.Leases != 0 ||
		sa.Tiers[0].Pages != 2 || sa.Tiers[0].PinnedPages != 2 || sa.Tiers[0].LeasedPages != 0 || sa.Tiers[0].CapacityBytes != all.Tiers[0].CapacityBytes {
		t.Fatalf("tenant a: %+v", sa)
	}
	sb, err := e.uds.TenantStats(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if sb.TenantPages != 3 || sb.TenantPinnedPages != 0 || sb.Leases != 1 || sb.Tiers[0].Pages != 3 || sb.Tiers[0].PinnedPages != 0 ||
		sb.Tiers[0].LeasedPages == 0 || sb.Tiers[0].LeasedPages != all.Tiers[0].LeasedPages {
		t.Fatalf("tenant b: %+v", sb)
	}
	if sn, err := e.uds.TenantStats(ctx, "nobody"); err != nil || sn.Tenant != "nobody" || sn.TenantPages != 0 || sn.Tiers[0].Pages != 0 {
		t.Fatalf("a tenant with no pages: %+v %v", sn, err)
	}
}

// Past control.rate_limit a uid's calls are refused with rate_limited and
// a retry hint: Apply and CacheControl in the response (as on NATS),
// Stats and WatchEvents with RESOURCE_EXHAUSTED. Nothing changes, NATS is
// not limited by it, and after the hinted wait the uid is served again.
func TestControlRateLimitPerUID(t *testing.T) {
	e := newLimitedEnv(t, map[ingress.Door]ingress.RateLimit{ingress.Socket: {PerSecond: 0.5, Burst: 3, Key: "control.rate_limit"}})
	a := e.commit("a", toks(0, 8)).Sequence
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pin := directive.Cache{BlockHashes: hs(a[1]), Pin: true}
	ok(t, apply(t, e.uds, "a", pin))
	ok(t, apply(t, e.uds, "a", pin))
	if _, err := e.uds.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot("a", a...)

	r := apply(t, e.uds, "a", pin)
	refused(t, r, -1, errcode.RateLimited)
	if r.Results[0].Error == nil || r.Results[0].Error.Code != errcode.RateLimited {
		t.Fatalf("per-directive result: %+v", r.Results)
	}
	retry := retryOf(t, r.Error.Detail)
	if !strings.Contains(r.Error.Detail, "uid "+selfUID()) || !strings.Contains(r.Error.Detail, "control.rate_limit") || r.Error.Entry().Hint == "" {
		t.Fatalf("rate limit refusal is not clear: %q", r.Error.Detail)
	}
	cc, err := e.uds.CacheControl(ctx, directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: hs(a[1])}, "a")
	if err != nil || cc.Status != directive.StatusError || cc.Code != errcode.RateLimited || !strings.Contains(cc.Message, "retry in") {
		t.Fatalf("cache_control past the limit: %+v %v", cc, err)
	}
	if _, err := e.uds.Stats(ctx); !errcodeIs(err, errcode.RateLimited) || !strings.Contains(err.Error(), "retry in") {
		t.Fatalf("stats past the limit: %v", err)
	}
	werr := e.uds.Watch(ctx, controlclient.WatchOptions{Ready: func() { t.Error("a rate-limited watch became ready") }},
		func(controlclient.Event) error { return nil })
	if !errcodeIs(werr, errcode.RateLimited) || errors.Is(werr, controlclient.ErrFellBehind) {
		t.Fatalf("watch past the limit: %v", werr)
	}
	if got := e.snapshot("a", a...); got != before {
		t.Fatal("a rate-limited call changed the index")
	}
	for _, rec := range e.ring.Records() {
		if rec.Code == errcode.RateLimited {
			t.Fatalf("a rate-limited call was audited: %+v", rec)
		}
	}
	ok(t, apply(t, e.nc, "a", pin)) // NATS has its own limit (off here)
	if got := gather(t, e)[`kvpilot_rate_limited_total{transport="socket"}`]; got != 4 {
		t.Fatalf("kvpilot_rate_limited_total{transport=socket} = %v, want 4 (Apply, CacheControl, Stats, WatchEvents)", got)
	}

	time.Sleep(retry + 50*time.Millisecond)
	ok(t, apply(t, e.uds, "a", pin))
}

// retryOf reads the wait from a rate-limit detail ("... retry in 1.9s").
func retryOf(t *testing.T, detail string) time.Duration {
	t.Helper()
	_, after, found := strings.Cut(detail, "retry in ")
	d, err := time.ParseDuration(strings.Fields(after + " ")[0])
	if !found || err != nil || d <= 0 || d > 3*time.Second {
		t.Fatalf("no usable retry hint in %q: %v", detail, err)
	}
	return d
}
