package gateway

import (
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// tenantWildcard lets an API key act for every tenant.
const tenantWildcard = "*"

// binding decides a request's tenant from its tenant header and API key,
// as control.tenants binds a uid on the Control socket: with no keys
// configured the header is taken as given; otherwise the key must be
// configured and the tenant one it is bound to (a key bound to exactly one
// tenant gets it when the header is absent).
type binding struct {
	header string
	keys   map[string][]string
}

func (b binding) tenant(r *http.Request) (string, *errcode.Error) {
	named := r.Header.Get(b.header)
	_, hasName := r.Header[http.CanonicalHeaderKey(b.header)]
	if len(b.keys) == 0 {
		return named, nil
	}
	tenants, ok := b.lookup(apiKey(r))
	switch {
	case !ok:
		return "", errcode.New(errcode.PermissionDenied, "the request's API key is not one of gateway.tenants (send it as Authorization: Bearer KEY or x-api-key)")
	case slices.Contains(tenants, tenantWildcard), hasName && slices.Contains(tenants, named):
		return named, nil
	case hasName:
		return "", errcode.New(errcode.PermissionDenied, "the API key may not act for tenant %q (it acts for %s); to grant it, add the tenant to its gateway.tenants entry",
			clipName(named), strings.Join(tenants, ", "))
	case len(tenants) == 1:
		return tenants[0], nil
	}
	return "", errcode.New(errcode.PermissionDenied, "the API key acts for %s; name one in the %s header", strings.Join(tenants, ", "), b.header)
}

// lookup compares keys in constant time.
func (b binding) lookup(key string) ([]string, bool) {
	if key == "" {
		return nil, false
	}
	for k, ts := range b.keys {
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			return ts, true
		}
	}
	return nil, false
}

func apiKey(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// clipName bounds a client's string in an error message.
func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
