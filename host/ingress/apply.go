package ingress

import (
	"context"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Apply applies a decoded turn whose Source and Tenant the door has
// verified: its text replacements are tokenized, the executor applies it
// all or none, and each directive is counted.
func (g *Ingress) Apply(ctx context.Context, t directive.Turn) (reply directive.TurnReply) {
	start := time.Now()
	defer g.countPanic(LabelTurn, start)
	if err := g.tokenizeReplacements(&t); err != nil {
		reply = g.refuseTurn(t, errcode.Wrap(errcode.BadRequest, err, "the host could not tokenize a text replacement"), true)
	} else {
		reply = g.cfg.Executor.Apply(ctx, t)
	}
	g.rec.Turn(reply, pinsOf(t.Directives), time.Since(start))
	return reply
}

// ApplyJSON decodes and applies a turn in any directive.DecodeTurn form, for
// a door that could not decode it itself: the executor answers and audits
// what is wrong with it.
func (g *Ingress) ApplyJSON(ctx context.Context, source, tenant string, data []byte) (reply directive.TurnReply) {
	start := time.Now()
	defer g.countPanic(LabelTurn, start)
	t, err := directive.DecodeTurn(data, g.Limits())
	if err != nil {
		reply = g.cfg.Executor.ApplyJSON(ctx, source, tenant, data)
		g.rec.Turn(reply, nil, time.Since(start))
		return reply
	}
	t.Source, t.Tenant = source, tenant
	return g.Apply(ctx, t)
}

// CacheControl applies a router cache_control request for tenant, audited
// under source, and counts it under its action.
func (g *Ingress) CacheControl(ctx context.Context, source, tenant string, c directive.CacheControl) (reply directive.CacheControlReply) {
	start := time.Now()
	defer g.countPanic(actionLabel(c.Action), start)
	reply = g.cfg.Executor.CacheControl(ctx, source, tenant, c)
	g.rec.CacheControl(c.Action, reply, time.Since(start))
	return reply
}

// CacheControlJSON is CacheControl for a payload the door could not
// decode; the executor answers and audits the refusal.
func (g *Ingress) CacheControlJSON(ctx context.Context, source, tenant string, action directive.Action, data []byte) (reply directive.CacheControlReply) {
	start := time.Now()
	defer g.countPanic(actionLabel(action), start)
	reply = g.cfg.Executor.CacheControlJSON(ctx, source, tenant, data)
	g.rec.CacheControl(action, reply, time.Since(start))
	return reply
}

// countPanic counts a panic on its way up as an internal error under
// label, so a door's recovery (a gRPC interceptor, a plugin's sink) does
// not have to know about metrics.
func (g *Ingress) countPanic(label string, start time.Time) {
	p := recover()
	if p == nil {
		return
	}
	g.rec.Directive(label, errcode.Internal, false)
	g.rec.Latency(label, time.Since(start))
	panic(p)
}

// pinsOf says which of ds are pins, for pin-rejection counts.
func pinsOf(ds []directive.Directive) func(int) bool {
	return func(i int) bool { return i < len(ds) && IsPin(ds[i]) }
}

func actionLabel(a directive.Action) string {
	if known(a) {
		return string(a)
	}
	return "cache_control"
}
