package grpcserver

import (
	"context"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Apply applies one turn. A refused turn, including one that could not be
// converted (a verb this host does not know, an invalid duration) and one
// for a tenant the caller's uid is not bound to, is a normal response with
// ok false; RPC errors are left to the transport.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if err := s.binding.Check(uidOf(ctx), req.GetTenant()); err != nil {
		e := errcode.From(err)
		r := s.refusedTurn(req, e)
		s.auditTurn(ctx, req, e)
		return convert.TurnReplyToProto(r), nil
	}
	t, err := convert.TurnFromApply(req, s.limits)
	if err != nil {
		e := errcode.From(err)
		return convert.TurnReplyToProto(directive.TurnReply{
			Status: directive.StatusError, TurnID: req.GetTurnId(), Error: e, Results: []directive.Result{},
		}), nil
	}
	t.Source = sourceOf(ctx)
	return convert.TurnReplyToProto(s.cfg.Executor.Apply(ctx, t)), nil
}

// CacheControl applies a router cache_control request for the tenant the
// request names, when the caller's uid may act for it.
func (s *Server) CacheControl(ctx context.Context, req *pb.CacheControlRequest) (*pb.CacheControlResponse, error) {
	if err := s.binding.Check(uidOf(ctx), req.GetTenant()); err != nil {
		e := errcode.From(err)
		s.audit(executor.Refused(executor.Record{Source: sourceOf(ctx), Tenant: clip(req.GetTenant()), Verb: clip(req.GetAction())}, e))
		return convert.CacheControlReplyToProto(directive.ErrorReply(e, directive.WorkerID(s.worker))), nil
	}
	c, tenant, err := convert.CacheControlFromProto(req)
	if err != nil {
		return convert.CacheControlReplyToProto(directive.ErrorReply(err, directive.WorkerID(s.worker))), nil
	}
	return convert.CacheControlReplyToProto(s.cfg.Executor.CacheControl(ctx, sourceOf(ctx), tenant, c)), nil
}

// auditTurn records a turn refused before the executor saw it, as the
// executor records a turn refused whole: one record, index -1.
func (s *Server) auditTurn(ctx context.Context, req *pb.ApplyRequest, e *errcode.Error) {
	if s.cfg.Audit == nil {
		return
	}
	target := ""
	if t, err := convert.TurnFromApply(req, s.limits); err == nil {
		target = t.String()
	}
	s.audit(executor.Refused(executor.Record{TurnID: clip(req.GetTurnId()), Source: sourceOf(ctx), Tenant: clip(req.GetTenant()),
		Index: -1, Verb: "turn", Target: target}, e))
}

func (s *Server) audit(r executor.Record) {
	if s.cfg.Audit == nil {
		return
	}
	if err := s.cfg.Audit.Append([]executor.Record{r}); err != nil {
		s.cfg.Log.Error("audit log write failed", "error", err)
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
