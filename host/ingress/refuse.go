package ingress

import (
	"time"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// RefuseTurn answers a turn its door refused before the executor saw it:
// every directive carries the turn's error, and the turn is counted. With
// audit set it is also recorded as the executor records a turn refused
// whole (one record, index -1): a tenant refusal is worth an operator's
// look. t.Tenant is the tenant claimed (or bound), t.Source the door's
// name for the caller; t.Directives may be empty when the turn did not
// decode.
func (g *Ingress) RefuseTurn(t directive.Turn, e *errcode.Error, audit bool) directive.TurnReply {
	start := time.Now()
	reply := g.refuseTurn(t, e, audit)
	g.rec.Turn(reply, pinsOf(t.Directives), time.Since(start))
	return reply
}

func (g *Ingress) refuseTurn(t directive.Turn, e *errcode.Error, audit bool) directive.TurnReply {
	r := directive.TurnReply{Status: directive.StatusError, TurnID: t.ID, Error: e, WorkerID: g.worker,
		Results: make([]directive.Result, len(t.Directives))}
	for i, d := range t.Directives {
		r.Results[i] = directive.Result{Index: i, Verb: d.Verb(), Status: directive.StatusError, Error: e.At(i)}
	}
	if audit {
		target := ""
		if len(t.Directives) > 0 {
			target = t.String()
		}
		g.audit(executor.Record{TurnID: clip(t.ID), Source: t.Source, Tenant: clip(t.Tenant), Verb: "turn", Target: target}, e)
	}
	return r
}

// RefuseCacheControl is RefuseTurn for a cache_control request.
func (g *Ingress) RefuseCacheControl(source, tenant string, action directive.Action, e *errcode.Error, audit bool) directive.CacheControlReply {
	start := time.Now()
	reply := directive.ErrorReply(e, g.worker)
	if audit {
		verb := "cache_control"
		if action != "" && len(action) <= 64 {
			verb = string(action)
		}
		g.audit(executor.Record{Source: source, Tenant: clip(tenant), Verb: verb}, e)
	}
	g.rec.CacheControl(action, reply, time.Since(start))
	return reply
}

func (g *Ingress) audit(rec executor.Record, e *errcode.Error) {
	g.cfg.Log.Warn("directive refused before the executor applied it", "source", rec.Source, "code", e.Code, "error", e.Error())
	if g.cfg.Audit == nil {
		return
	}
	rec.Index = -1
	if err := g.cfg.Audit.Append([]executor.Record{executor.Refused(rec, e)}); err != nil {
		g.cfg.Log.Error("audit log write failed", "error", err)
	}
}

// clip bounds a peer's string before it reaches the audit log; names are
// checked only later, by the executor, which a refused call never reaches.
func clip(v string) string {
	if len(v) > directive.MaxNameLen {
		return v[:directive.MaxNameLen] + "..."
	}
	return v
}
