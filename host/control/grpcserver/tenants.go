package grpcserver

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// TenantWildcard in a uid's tenant list lets it act for every tenant (an
// operator's uid). It is the config's control.tenants "*".
const TenantWildcard = "*"

// TenantBinding decides which tenants a peer uid may act for, from
// control.tenants. The socket's allow-list says who may connect at all;
// the binding says, of those, who may touch which tenant's cache, so one
// router's uid cannot pin, prune or read another tenant's pages by naming
// that tenant.
type TenantBinding struct {
	// Of returns the tenants uid may act for and whether tenants are
	// bound at all (config.Control.TenantsOf). Nil binds nobody: every
	// allowed uid acts for any tenant.
	Of func(uid int) (tenants []string, bound bool)
}

// Check returns nil when uid may act for tenant ("" is the default tenant,
// which a bound uid must be granted like any other), and otherwise a
// permission_denied error naming the uid, the tenant and the config key
// that would grant it.
func (b TenantBinding) Check(uid int, tenant string) error {
	tenants, bound := b.of(uid)
	if !bound || slices.Contains(tenants, TenantWildcard) || slices.Contains(tenants, tenant) {
		return nil
	}
	return errcode.New(errcode.PermissionDenied, "uid %d may not act for tenant %q: %s; to grant it, add %q to control.tenants.%d",
		uid, clip(tenant), describe(uid, tenants), clip(tenant), uid)
}

// Default resolves the tenant of a call that may name none (Stats,
// WatchEvents): a named tenant is checked; with none, a uid that sees every
// tenant (unbound, or "*") gets all (true), a uid bound to exactly one
// tenant gets that one, and a uid bound to several must name one.
func (b TenantBinding) Default(uid int, named string, hasName bool) (tenant string, all bool, err error) {
	if hasName {
		if err := b.Check(uid, named); err != nil {
			return "", false, err
		}
		return named, false, nil
	}
	tenants, bound := b.of(uid)
	switch {
	case !bound || slices.Contains(tenants, TenantWildcard):
		return "", true, nil
	case len(tenants) == 1:
		return tenants[0], false, nil
	case len(tenants) == 0:
		return "", false, errcode.New(errcode.PermissionDenied, "uid %d may act for no tenant: %s; to grant it, list its tenants in control.tenants.%d",
			uid, describe(uid, tenants), uid)
	}
	return "", false, errcode.New(errcode.PermissionDenied, "uid %d sees only its own tenants (%s) and must name one of them",
		uid, strings.Join(tenants, ", "))
}

func (b TenantBinding) of(uid int) ([]string, bool) {
	if b.Of == nil {
		return nil, false
	}
	return b.Of(uid)
}

func describe(uid int, tenants []string) string {
	if len(tenants) == 0 {
		return fmt.Sprintf("control.tenants does not list uid %d", uid)
	}
	return fmt.Sprintf("control.tenants binds it to %s", strings.Join(tenants, ", "))
}
