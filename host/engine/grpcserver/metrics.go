package grpcserver

import (
	"context"
	"path"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
)

// outcomeOK is the outcome label of an engine call that succeeded; a
// failed one is labelled with its registry code.
const outcomeOK = "ok"

// countUnary counts every unary engine call by method and outcome. It sits
// outside the recovery interceptor, so a panic counts as internal.
func countUnary(m *metrics.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		m.EngineRequests.WithLabelValues(path.Base(info.FullMethod), outcome(err)).Inc()
		return resp, err
	}
}

// countStream counts every engine stream, when it ends, by method and
// outcome.
func countStream(m *metrics.Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		m.EngineRequests.WithLabelValues(path.Base(info.FullMethod), outcome(err)).Inc()
		return err
	}
}

func outcome(err error) string {
	if err == nil {
		return outcomeOK
	}
	return string(convert.FromGRPCStatus(err).Code)
}
