package cache

import (
	"testing"
	"time"
)

// Tenants mapped to one namespace share its pages, pins and quota; the
// index reports them under the namespace, and a namespace handed back as
// a tenant names the same pages.
func TestSharedNamespace(t *testing.T) {
	team := map[string]string{"alice": "team", "bob": "team"}
	h := newHarness(t, func(c *Config) {
		c.TenantPinQuota = 2
		c.Namespace = func(tenant string) string {
			if ns, ok := team[tenant]; ok {
				return ns
			}
			return tenant
		}
	})
	toks := tokens(9, 2*testPage)
	a := h.commitSalt("alice", h.ix.Salt("alice"), toks)
	if h.ix.Salt("bob") != h.ix.Salt("alice") || h.ix.Salt("carol").Namespace != "carol" {
		t.Fatalf("salts: alice %+v bob %+v carol %+v", h.ix.Salt("alice"), h.ix.Salt("bob"), h.ix.Salt("carol"))
	}
	var m MatchResult
	h.ix.Match("bob", h.ix.Salt("bob"), toks, &m)
	if len(m.Pages) != 2 {
		t.Fatalf("bob matched %d of alice's 2 pages", len(m.Pages))
	}
	h.ix.Match("carol", h.ix.Salt("carol"), toks, &m)
	if len(m.Pages) != 0 {
		t.Fatalf("carol matched %d pages outside her namespace", len(m.Pages))
	}
	if pi := h.info("team", a.Sequence[1]); pi.Tenant != "team" {
		t.Fatalf("page reported under %q, want the namespace", pi.Tenant)
	}
	// The quota is the namespace's: alice's pin of both pages uses it up.
	if _, err := h.ix.Pin(TargetHashes("alice", a.Sequence...), time.Minute); err != nil {
		t.Fatal(err)
	}
	b := h.commitSalt("bob", h.ix.Salt("bob"), tokens(100, testPage))
	if _, err := h.ix.Pin(TargetHashes("bob", b.Sequence...), time.Minute); err == nil {
		t.Fatal("bob pinned past the namespace's quota of 2")
	} else {
		wantErr(t, err, ErrTenantQuota)
	}
	h.check()
}
