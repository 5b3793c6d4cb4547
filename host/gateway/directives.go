package gateway

import (
	"context"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Directives is where the front door sends the directives it derives
// (the pins of cache_control breakpoints, and the splices of edits on a
// connector-mode engine). It is the one place the
// gateway touches the directive path.
type Directives interface {
	// Submit applies ds for tenant as one turn, all or none.
	Submit(ctx context.Context, tenant string, ds []directive.Directive) directive.TurnReply
}

// Source is how the front door's directives are audited.
const Source = "gateway"

// IngressDirectives hands the front door's turns to the host's ingress,
// which counts, audits and applies them as it does every door's. The front
// door binds tenants itself (tenants.go), so the turn goes in with the
// tenant it bound.
type IngressDirectives struct {
	In *ingress.Ingress
}

// Submit applies ds as one turn of tenant.
func (x IngressDirectives) Submit(ctx context.Context, tenant string, ds []directive.Directive) directive.TurnReply {
	return x.In.Apply(ctx, directive.Turn{Source: Source, Tenant: tenant, Directives: ds})
}
