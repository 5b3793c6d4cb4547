package plugins

import (
	"slices"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// A policy confined to tenants (config policies[].tenants) is a policy the
// operator runs for some tenants only, often a tenant's own binary: it must
// neither read other tenants' prompts nor act on their caches.

// admits reports whether obs may reach the instance: every observation when
// it is not confined; otherwise its tenants' requests and KV events, and
// the host-wide ticks and tier pressure, which carry no tenant's data.
func (in *instance) admits(obs policy.Observation) bool {
	if len(in.spec.Tenants) == 0 {
		return true
	}
	switch obs.Kind {
	case policy.KindTick, policy.KindTierPressure:
		return true
	}
	return slices.Contains(in.spec.Tenants, obs.Tenant)
}

// outside refuses a turn for a tenant the instance is not confined to,
// before it reaches the sink.
func (in *instance) outside(tenant string) error {
	if len(in.spec.Tenants) == 0 || slices.Contains(in.spec.Tenants, tenant) {
		return nil
	}
	return errcode.New(errcode.PermissionDenied,
		"policy %q is confined to tenants %q and may not act for tenant %q (config policies[].tenants)",
		in.name, in.spec.Tenants, tenant)
}
