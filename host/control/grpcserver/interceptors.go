package grpcserver

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/control"
	"github.com/kvpilot/kvpilot/sdk/directive"
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
