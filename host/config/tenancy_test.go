package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestTenancyKeys(t *testing.T) {
	c, err := Load(writeFile(t, `
index:
  share: {team-x: [alice, bob]}
control:
  tenants: {"1001": [acme], "0": ["*"]}
  rate_limit: 50
nats:
  tenant_subjects: true
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]string{"alice": "team-x", "bob": "team-x", "carol": "carol", "": ""} {
		if got := c.Index.NamespaceOf(tenant); got != want {
			t.Errorf("NamespaceOf(%q) = %q, want %q", tenant, got, want)
		}
	}
	if ts, bound := c.Control.TenantsOf(1001); !bound || !reflect.DeepEqual(ts, []string{"acme"}) {
		t.Errorf("TenantsOf(1001) = %v, %v", ts, bound)
	}
	if ts, bound := c.Control.TenantsOf(4242); !bound || len(ts) != 0 {
		t.Errorf("an unlisted uid must be bound to nothing, got %v, %v", ts, bound)
	}
	if !c.NATS.TenantSubjects || c.Control.RateLimit != 50 {
		t.Errorf("nats.tenant_subjects / control.rate_limit not loaded: %+v %+v", c.NATS, c.Control)
	}
	if _, bound := Default().Control.TenantsOf(1001); bound {
		t.Error("by default no uid is bound to tenants")
	}
	off := Default().Index
	off.NamespaceSalt = false
	if off.NamespaceOf("alice") != "" {
		t.Error("with the salt off every tenant must share the unsalted namespace")
	}
}

func TestTenancyInvalid(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"index: {share: {team: [a, b]}, namespace_salt: false}", "index.share"},
		{"index: {share: {team: [a]}}", "index.share.team"},
		{"index: {share: {x: [a, b], y: [b, c]}}", "already in shared namespace"},
		{"index: {share: {x: [a, y], y: [c, d]}}", "is also a tenant of shared namespace"},
		{`control: {tenants: {"root": [a]}}`, "control.tenants"},
		{`control: {tenants: {"7": []}}`, "control.tenants.7"},
		{"control: {rate_limit: -1}", "control.rate_limit"},
		{"control: {rate_burst: 0}", "control.rate_burst"},
		{"nats: {users: [{nkey: UABC, tenants: [a]}]}", "users need nats.tenant_subjects"},
		{"nats: {tenant_subjects: true, users: [{nkey: UABC, tenants: [a]}]}", "nats.users[0].nkey"},
		{"nats: {url: nats://x:4222, tenant_subjects: true, users: [{nkey: UABC, tenants: [a]}]}", "configured on the cluster"},
	} {
		_, err := Load(writeFile(t, tc.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: want an error naming %q, got %v", tc.yaml, tc.key, err)
		}
	}
}
