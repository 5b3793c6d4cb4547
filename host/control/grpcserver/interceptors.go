package grpcserver

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/control"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// metricsUnary counts Apply's directives by verb and result and
// CacheControl's requests by action, with their latency. It sits outside
// the recovery interceptor, so a panic is counted as an internal error.
func (s *Server) metricsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if s.cfg.Recorder == nil {
		return resp, err
	}
	elapsed := time.Since(start)
	switch req := req.(type) {
	case *pb.ApplyRequest:
		if r, ok := resp.(*pb.ApplyResponse); ok && err == nil {
			pins := func(i int) bool {
				d := req.GetDirectives()
				if i >= len(d) {
					return false
				}
				return d[i].GetPin() != nil || d[i].GetCache().GetPin()
			}
			s.cfg.Recorder.Turn(convert.ApplyResponseToReply(r), pins, elapsed)
			return resp, err
		}
		s.cfg.Recorder.Directive(control.LabelTurn, convert.FromGRPCStatus(err).Code, false)
		s.cfg.Recorder.Latency(control.LabelTurn, elapsed)
	case *pb.CacheControlRequest:
		a := directive.Action(req.GetAction())
		if r, ok := resp.(*pb.CacheControlResponse); ok && err == nil {
			s.cfg.Recorder.CacheControl(a, convert.CacheControlReplyFromProto(r), elapsed)
			return resp, err
		}
		s.cfg.Recorder.CacheControl(a, directive.CacheControlReply{Code: convert.FromGRPCStatus(err).Code}, elapsed)
	}
	return resp, err
}

// recoverUnary turns a handler's panic into an internal error for that one
// call, logged with its stack: a bug in one verb must not take the host,
// and every engine and router on it, down.
func recoverUnary(log hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, panicError(log, info.FullMethod, p)
			}
		}()
		return handler(ctx, req)
	}
}

// recoverStream is recoverUnary for streams (WatchEvents).
func recoverStream(log hclog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = panicError(log, info.FullMethod, p)
			}
		}()
		return handler(srv, ss)
	}
}

func panicError(log hclog.Logger, method string, p any) error {
	log.Error("panic in control call; answered internal", "method", method, "panic", p, "stack", string(debug.Stack()))
	return convert.GRPCStatus(errcode.New(errcode.Internal, "panic in %s: %v", method, p))
}
