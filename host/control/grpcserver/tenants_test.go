package grpcserver

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The binding follows control.tenants: empty binds nobody; once one uid is
// listed, a uid acts only for its tenants ("*" for all), and an unlisted
// uid for none. Refusals are permission_denied naming the uid, the tenant
// and the key that would grant it.
func TestTenantBindingCheck(t *testing.T) {
	bound := config.Control{Tenants: map[string][]string{"1000": {"a"}, "1001": {"a", "b"}, "0": {config.TenantWildcard}}}
	for _, tc := range []struct {
		name   string
		cfg    config.Control
		uid    int
		tenant string
		ok     bool
	}{
		{"unbound: anyone, any tenant", config.Control{}, 1000, "b", true},
		{"unbound: the default tenant", config.Control{}, 1000, "", true},
		{"bound to a, acts for a", bound, 1000, "a", true},
		{"bound to a, refused b", bound, 1000, "b", false},
		{"bound to a, refused the default tenant", bound, 1000, "", false},
		{"bound to a and b, acts for b", bound, 1001, "b", true},
		{"wildcard acts for any", bound, 0, "zzz", true},
		{"wildcard acts for the default tenant", bound, 0, "", true},
		{"unlisted uid refused", bound, 1002, "a", false},
		{"unknown caller refused", bound, -1, "a", false},
	} {
		err := TenantBinding{Of: tc.cfg.TenantsOf}.Check(tc.uid, tc.tenant)
		if (err == nil) != tc.ok {
			t.Errorf("%s: got %v", tc.name, err)
			continue
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, errcode.ErrPermissionDenied) {
			t.Errorf("%s: %v is not permission_denied", tc.name, err)
		}
		msg := err.Error()
		for _, want := range []string{"permission_denied: ", "uid " + itoa(tc.uid), "tenant \"" + tc.tenant + "\"", "control.tenants." + itoa(tc.uid)} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q lacks %q", tc.name, msg, want)
			}
		}
	}
	// A nil binding (no Tenants configured) binds nobody.
	if err := (TenantBinding{}).Check(5, "x"); err != nil {
		t.Fatal(err)
	}
}

// Default resolves calls that may name no tenant (Stats, WatchEvents).
func TestTenantBindingDefault(t *testing.T) {
	bound := config.Control{Tenants: map[string][]string{"1000": {"a"}, "1001": {"a", "b"}, "0": {config.TenantWildcard}}}
	for _, tc := range []struct {
		name     string
		cfg      config.Control
		uid      int
		named    string
		hasName  bool
		tenant   string
		all, err bool
	}{
		{"unbound, none named: all", config.Control{}, 1000, "", false, "", true, false},
		{"unbound, named", config.Control{}, 1000, "b", true, "b", false, false},
		{"wildcard, none named: all", bound, 0, "", false, "", true, false},
		{"bound to one, none named: that one", bound, 1000, "", false, "a", false, false},
		{"bound to one, names it", bound, 1000, "a", true, "a", false, false},
		{"bound to one, names another", bound, 1000, "b", true, "", false, true},
		{"bound to two, none named", bound, 1001, "", false, "", false, true},
		{"bound to two, names one", bound, 1001, "b", true, "b", false, false},
		{"unlisted, none named", bound, 7, "", false, "", false, true},
	} {
		tenant, all, err := TenantBinding{Of: tc.cfg.TenantsOf}.Default(tc.uid, tc.named, tc.hasName)
		if tenant != tc.tenant || all != tc.all || (err != nil) != tc.err {
			t.Errorf("%s: got %q, all %v, %v", tc.name, tenant, all, err)
		}
		if err != nil && (!errors.Is(err, errcode.ErrPermissionDenied) || !strings.Contains(err.Error(), "uid "+itoa(tc.uid))) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func itoa(v int) string { return strconv.Itoa(v) }
