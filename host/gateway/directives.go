package gateway

import (
	"context"
	"time"

	"github.com/kvpilot/kvpilot/host/control"
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
// Its turns are counted in the directive metrics like every other door's.
type ExecutorDirectives struct {
	Exec     *executor.Executor
	Recorder *control.Recorder // nil counts nothing
}

// Submit applies ds as one turn of tenant.
func (x ExecutorDirectives) Submit(ctx context.Context, tenant string, ds []directive.Directive) directive.TurnReply {
	start := time.Now()
	reply := x.Exec.Apply(ctx, directive.Turn{Source: Source, Tenant: tenant, Directives: ds})
	x.Recorder.Turn(reply, func(i int) bool { return i < len(ds) && control.IsPin(ds[i]) }, time.Since(start))
	return reply
}
