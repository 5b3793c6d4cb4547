package policy

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

func TestScopedRoundTrip(t *testing.T) {
	d := directive.RevokeLease{LeaseID: "x"}
	rep, err := replyToProto([]Directive{WithTenant("acme", d), d}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tenants) != 2 || rep.Tenants[0] != "acme" || rep.Tenants[1] != "" {
		t.Fatalf("tenants %v", rep.Tenants)
	}
	if rep, _ := replyToProto([]Directive{d}, nil, true); rep.Tenants != nil {
		t.Fatal("unscoped replies must not carry tenants (old hosts ignore them anyway)")
	}
	if tn, inner := Unwrap(WithTenant("b", WithTenant("a", d))); tn != "b" || inner != directive.Directive(d) {
		t.Fatalf("rewrapping: %q %v", tn, inner)
	}
}
