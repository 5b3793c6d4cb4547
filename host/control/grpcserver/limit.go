package grpcserver

import (
	"context"
	"strconv"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Every Control call, and every WatchEvents stream it opens, takes a token
// from its peer uid's bucket at the ingress (control.rate_limit,
// control.rate_burst), so one runaway client cannot starve the routers and
// operators sharing the socket. The uid, read from SO_PEERCRED, is the one
// identity on the socket a client cannot choose.
//
// Apply and CacheControl answer past the limit as the NATS command plane
// does, in the response (ok false, or status "error", with rate_limited),
// so a caller of controlclient.Client sees the same on both transports.
// Stats and WatchEvents, which only the socket serves, answer with a
// RESOURCE_EXHAUSTED status carrying the registry code.

// rateKey is the limiter's source for a peer: its uid, or "uid ?" outside
// a socket connection.
func rateKey(ctx context.Context) string {
	if p, ok := rpcpeer.Of(ctx); ok {
		return "uid " + strconv.Itoa(p.UID)
	}
	return "uid ?"
}

// limitUnary refuses unary calls past their uid's limit.
func (s *Server) limitUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	e := s.cfg.Ingress.Admit(ingress.Socket, rateKey(ctx))
	if e == nil {
		return handler(ctx, req)
	}
	switch req := req.(type) {
	case *pb.ApplyRequest:
		t, err := convert.TurnFromApply(req, s.limits)
		if err != nil {
			t.Directives = nil
		}
		t.Source = sourceOf(ctx)
		return convert.TurnReplyToProto(s.cfg.Ingress.RefuseTurn(t, e, false)), nil
	case *pb.CacheControlRequest:
		return convert.CacheControlReplyToProto(s.cfg.Ingress.RefuseCacheControl(sourceOf(ctx), req.GetTenant(),
			directive.Action(req.GetAction()), e, false)), nil
	}
	return nil, convert.GRPCStatus(e)
}

// limitStream refuses opening a stream past the uid's limit; a stream
// already open is not limited (it costs the host one send per event).
func (s *Server) limitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if e := s.cfg.Ingress.Admit(ingress.Socket, rateKey(ss.Context())); e != nil {
		return convert.GRPCStatus(e)
	}
	return handler(srv, ss)
}
