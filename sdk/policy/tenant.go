package policy

import (
	"encoding/json"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Scoped is a directive with the tenant it acts for. Observe usually
// returns plain directives, which act for the observation's tenant; a
// policy that acts on a Tick (which belongs to no session) or on behalf of
// another session's tenant wraps them with WithTenant.
type Scoped struct {
	Tenant string
	directive.Directive
}

// WithTenant scopes d to tenant.
func WithTenant(tenant string, d Directive) Directive {
	if s, ok := d.(Scoped); ok {
		d = s.Directive
	}
	return Scoped{Tenant: tenant, Directive: d}
}

// Unwrap returns the directive inside a Scoped one and its tenant, or d
// itself and "" (the observation's tenant).
func Unwrap(d Directive) (tenant string, inner Directive) {
	if s, ok := d.(Scoped); ok {
		return s.Tenant, s.Directive
	}
	return "", d
}

// MarshalJSON writes {"tenant": ..., "directive": {...}}, for logs and golden
// files; the plugin protocol carries the tenant beside the directive instead.
func (s Scoped) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Tenant    string              `json:"tenant"`
		Directive directive.Directive `json:"directive"`
	}{s.Tenant, s.Directive})
}
