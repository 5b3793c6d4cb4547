package ingress

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Apply applies a decoded turn whose Source and Tenant the door has
// verified: its text replacements are tokenized, the executor applies it
// all or none, and each directive is counted.
func (g *Ingress) Apply(ctx context.Context, t directive.Turn) (reply directive.TurnReply) {
	start := time.Now()
	defer func() { g.rec.Turn(reply, pinsOf(t.Directives), time.Since(start)) }()
	defer g.recoverTurn(t, &reply)
	if err := g.tokenizeReplacements(&t); err != nil {
		return g.refuseTurn(t, errcode.Wrap(errcode.BadRequest, err, "the host could not tokenize a text replacement"), true)
	}
	return g.cfg.Executor.Apply(ctx, t)
}

// ApplyJSON decodes and applies a turn in any directive.DecodeTurn form, for
// a door that could not decode it itself: the executor answers and audits
// what is wrong with it.
func (g *Ingress) ApplyJSON(ctx context.Context, source, tenant string, data []byte) (reply directive.TurnReply) {
	t, err := directive.DecodeTurn(data, g.Limits())
	if err == nil {
		t.Source, t.Tenant = source, tenant
		return g.Apply(ctx, t)
	}
	start := time.Now()
	defer func() { g.rec.Turn(reply, nil, time.Since(start)) }()
	defer g.recoverTurn(directive.Turn{Source: source, Tenant: tenant}, &reply)
	return g.cfg.Executor.ApplyJSON(ctx, source, tenant, data)
}

// CacheControl applies a router cache_control request for tenant, audited
// under source, and counts it under its action.
func (g *Ingress) CacheControl(ctx context.Context, source, tenant string, c directive.CacheControl) (reply directive.CacheControlReply) {
	start := time.Now()
	defer func() { g.rec.CacheControl(c.Action, reply, time.Since(start)) }()
	defer g.recoverCacheControl(source, tenant, c.Action, &reply)
	return g.cfg.Executor.CacheControl(ctx, source, tenant, c)
}

// CacheControlJSON is CacheControl for a payload the door could not
// decode; the executor answers and audits the refusal.
func (g *Ingress) CacheControlJSON(ctx context.Context, source, tenant string, action directive.Action, data []byte) (reply directive.CacheControlReply) {
	start := time.Now()
	defer func() { g.rec.CacheControl(action, reply, time.Since(start)) }()
	defer g.recoverCacheControl(source, tenant, action, &reply)
	return g.cfg.Executor.CacheControlJSON(ctx, source, tenant, data)
}

// recoverTurn answers a panic on its way up from the executor as the
// turn's internal error, logged with its stack and audited: every door
// (NATS and the policies have no recovery of their own) gets a reply, and
// the host serves the next call, since the index lock is released on the
// way up (host/internal/guarded). It is deferred, so recover sees the panic.
func (g *Ingress) recoverTurn(t directive.Turn, reply *directive.TurnReply) {
	if p := recover(); p != nil {
		*reply = g.refuseTurn(t, g.panicked(t.Source, p), true)
	}
}

// recoverCacheControl is recoverTurn for a cache_control request.
func (g *Ingress) recoverCacheControl(source, tenant string, action directive.Action, reply *directive.CacheControlReply) {
	if p := recover(); p != nil {
		e := g.panicked(source, p)
		*reply = directive.ErrorReply(e, g.worker)
		g.audit(executor.Record{Source: source, Tenant: clip(tenant), Verb: actionLabel(action)}, e)
	}
}

func (g *Ingress) panicked(source string, p any) *errcode.Error {
	g.cfg.Log.Error("panic while applying a directive; answered internal", "source", source, "panic", p, "stack", string(debug.Stack()))
	return errcode.New(errcode.Internal, "the host failed while applying it (a bug, logged with its stack): %v", p)
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
