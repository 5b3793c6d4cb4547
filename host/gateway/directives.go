package gateway

import (
	"context"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Directives is where the front door sends the directives it derives
// (today: the pins of cache_control breakpoints). It is the one place the
// gateway touches the directive path, so the host's single directive
// ingress can replace the executor behind it.
type Directives interface {
	// Submit applies ds for tenant as one turn, all or none.
	Submit(ctx context.Context, tenant string, ds []directive.Directive) directive.TurnReply
}

// Source is how the front door's directives are audited.
const Source = "gateway"

// ExecutorDirectives applies turns with the host's executor, as the
// Control socket does once it has bound the caller to the tenant (the
// front door binds tenants itself: tenants.go).
type ExecutorDirectives struct{ Exec *executor.Executor }

// Submit applies ds as one turn of tenant.
func (x ExecutorDirectives) Submit(ctx context.Context, tenant string, ds []directive.Directive) directive.TurnReply {
	return x.Exec.Apply(ctx, directive.Turn{Source: Source, Tenant: tenant, Directives: ds})
}
