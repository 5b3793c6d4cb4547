package plugins

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
)

func TestSplitByTenant(t *testing.T) {
	a := directive.RevokeLease{LeaseID: "a"}
	b := directive.RevokeLease{LeaseID: "b"}
	c := directive.RevokeLease{LeaseID: "c"}
	plain := splitByTenant("p", "obs", pluginwire.Result{Directives: []directive.Directive{a, b}})
	if len(plain) != 1 || plain[0].Tenant != "obs" || plain[0].Source != "p" || len(plain[0].Directives) != 2 {
		t.Fatalf("unscoped: %+v", plain)
	}
	got := splitByTenant("p", "obs", pluginwire.Result{
		Directives: []directive.Directive{a, b, c},
		Tenants:    []string{"t1", "", "t1"},
	})
	if len(got) != 2 || got[0].Tenant != "t1" || got[1].Tenant != "obs" {
		t.Fatalf("turns %+v", got)
	}
	if len(got[0].Directives) != 2 || got[0].Directives[1] != c || got[1].Directives[0] != b {
		t.Fatalf("order within tenants lost: %+v", got)
	}
}
