package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
)

// Tenancy: who may act for which tenant, and which tenants share a cache
// namespace. These keys live in the index, control and nats sections; their
// checks are gathered here because they only make sense together.

// TenantWildcard in control.tenants lets a uid act for every tenant (an
// operator's).
const TenantWildcard = "*"

// validateTenancy checks index.share, control.tenants and the socket's
// rate limit.
func (c Config) validateTenancy() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if len(c.Index.Share) > 0 && !c.Index.NamespaceSalt {
		bad("index.share", "has no effect with index.namespace_salt off (every tenant already shares one namespace); remove one of them")
	}
	owner := map[string]string{}
	for _, ns := range sortedKeys(c.Index.Share) {
		if ns == "" {
			bad("index.share", "a shared namespace needs a non-empty name")
		}
		if len(c.Index.Share[ns]) < 2 {
			bad("index.share."+ns, "lists %d tenant(s); sharing needs at least two", len(c.Index.Share[ns]))
		}
		for _, t := range c.Index.Share[ns] {
			if prev, dup := owner[t]; dup {
				bad("index.share."+ns, "tenant %q is already in shared namespace %q; a tenant has one namespace", t, prev)
			}
			owner[t] = ns
		}
	}
	for _, ns := range sortedKeys(c.Index.Share) {
		// The index reports pages by namespace and is handed those names
		// back as tenants, so a namespace must map to itself.
		if prev, ok := owner[ns]; ok && prev != ns {
			bad("index.share."+ns, "is also a tenant of shared namespace %q; name the namespace differently", prev)
		}
	}
	for _, uid := range sortedKeys(c.Control.Tenants) {
		if n, err := strconv.Atoi(uid); err != nil || n < 0 {
			bad("control.tenants", "key %q is not a uid (a non-negative integer)", uid)
		}
		if len(c.Control.Tenants[uid]) == 0 {
			bad("control.tenants."+uid, "lists no tenant; list them, or %q for all, or remove the uid", TenantWildcard)
		}
	}
	for i, u := range c.NATS.Users {
		key := fmt.Sprintf("nats.users[%d]", i)
		switch {
		case c.NATS.URL != "":
			bad(key, "users are for the embedded server; a cluster's users are configured on the cluster")
		case !c.NATS.TenantSubjects:
			bad(key, "users need nats.tenant_subjects: true (a user's rights are its tenants' subjects)")
		case !nkeys.IsValidPublicUserKey(u.NKey):
			bad(key+".nkey", "%q is not a public user nkey (U..., from `nk -gen user -pubout`)", u.NKey)
		case len(u.Tenants) == 0:
			bad(key+".tenants", "lists no tenant; list them, \"\" for the default tenant or %q for all", TenantWildcard)
		}
		for _, t := range u.Tenants {
			if t != TenantWildcard && strings.ContainsAny(t, ".*> \t\r\n") {
				bad(key+".tenants", "tenant %q cannot be a NATS subject token (no '.', '*', '>' or spaces)", t)
			}
		}
	}
	if c.Control.RateLimit < 0 {
		bad("control.rate_limit", "must not be negative, got %v", c.Control.RateLimit)
	}
	if c.Control.RateBurst < 1 {
		bad("control.rate_burst", "must be at least 1, got %d", c.Control.RateBurst)
	}
	return errs
}

// NamespaceOf returns the cache namespace of tenant: the shared namespace
// that index.share puts it in, "" for everyone with index.namespace_salt
// off, and otherwise the tenant itself (the tenant is the
// namespace by default).
func (c Index) NamespaceOf(tenant string) string {
	if f := c.NamespaceFunc(); f != nil {
		return f(tenant)
	}
	return tenant
}

// NamespaceFunc returns NamespaceOf as a function with its table built
// once (the index calls it on every lookup), or nil when every tenant is
// its own namespace.
func (c Index) NamespaceFunc() func(tenant string) string {
	if !c.NamespaceSalt {
		return func(string) string { return "" }
	}
	if len(c.Share) == 0 {
		return nil
	}
	of := map[string]string{}
	for ns, tenants := range c.Share {
		for _, t := range tenants {
			of[t] = ns
		}
	}
	return func(tenant string) string {
		if ns, ok := of[tenant]; ok {
			return ns
		}
		return tenant
	}
}

// TenantsOf returns the tenants control.tenants lets uid act for, and
// whether tenants are bound at all. An empty control.tenants binds nobody:
// every allowed uid may act for any tenant. Once it lists any uid, a uid
// it does not list may act for none.
func (c Control) TenantsOf(uid int) (tenants []string, bound bool) {
	if len(c.Tenants) == 0 {
		return nil, false
	}
	return c.Tenants[strconv.Itoa(uid)], true
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
