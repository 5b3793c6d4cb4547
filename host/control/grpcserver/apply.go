package grpcserver

import (
	"context"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// The socket's door: it knows the caller's uid (SO_PEERCRED) and binds it
// to tenants; the ingress does the rest (counting, auditing, applying).

// Apply applies one turn. A refused turn, including one that could not be
// converted (a verb this host does not know, an invalid duration) and one
// for a tenant the caller's uid is not bound to, is a normal response with
// ok false; RPC errors are left to the transport.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	t, cerr := convert.TurnFromApply(req, s.limits)
	t.ID, t.Source, t.Tenant = req.GetTurnId(), sourceOf(ctx), req.GetTenant()
	if cerr != nil {
		// A turn that does not convert is answered without per-directive
		// results.
		t.Directives = nil
	}
	if err := s.binding.Check(uidOf(ctx), req.GetTenant()); err != nil {
		return convert.TurnReplyToProto(s.cfg.Ingress.RefuseTurn(t, errcode.From(err), true)), nil
	}
	if cerr != nil {
		// Not audited: the payload named nothing the host could act on.
		return convert.TurnReplyToProto(s.cfg.Ingress.RefuseTurn(t, errcode.From(cerr), false)), nil
	}
	return convert.TurnReplyToProto(s.cfg.Ingress.Apply(ctx, t)), nil
}

// CacheControl applies a router cache_control request for the tenant the
// request names, when the caller's uid may act for it.
func (s *Server) CacheControl(ctx context.Context, req *pb.CacheControlRequest) (*pb.CacheControlResponse, error) {
	action := directive.Action(req.GetAction())
	if err := s.binding.Check(uidOf(ctx), req.GetTenant()); err != nil {
		return convert.CacheControlReplyToProto(s.cfg.Ingress.RefuseCacheControl(sourceOf(ctx), req.GetTenant(), action, errcode.From(err), true)), nil
	}
	c, tenant, err := convert.CacheControlFromProto(req)
	if err != nil {
		return convert.CacheControlReplyToProto(s.cfg.Ingress.RefuseCacheControl(sourceOf(ctx), req.GetTenant(), action, errcode.From(err), false)), nil
	}
	return convert.CacheControlReplyToProto(s.cfg.Ingress.CacheControl(ctx, sourceOf(ctx), tenant, c)), nil
}

// clip bounds a peer's string before it reaches an error message.
func clip(v string) string {
	if len(v) > directive.MaxNameLen {
		return v[:directive.MaxNameLen] + "..."
	}
	return v
}
