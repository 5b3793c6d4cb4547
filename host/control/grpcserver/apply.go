package grpcserver

import (
	"context"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Apply applies one turn. A refused turn, including one that could not be
// converted (a verb this host does not know, an invalid duration), is a
// normal response with ok false; RPC errors are left to the transport.
func (s *Server) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
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
// request names.
func (s *Server) CacheControl(ctx context.Context, req *pb.CacheControlRequest) (*pb.CacheControlResponse, error) {
	c, tenant, err := convert.CacheControlFromProto(req)
	if err != nil {
		return convert.CacheControlReplyToProto(directive.ErrorReply(err, directive.WorkerID(s.worker))), nil
	}
	return convert.CacheControlReplyToProto(s.cfg.Executor.CacheControl(ctx, sourceOf(ctx), tenant, c)), nil
}
