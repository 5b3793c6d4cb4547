package rpcpeer

import (
	"context"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
)

// RecoverUnary answers a handler's panic as an internal error for that call
// alone, logged with its stack: a bug in one call must not take the host,
// and every engine and router on it, down. service names the server in
// the log.
func RecoverUnary(log hclog.Logger, service string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, panicError(log, service, info.FullMethod, p)
			}
		}()
		return h(ctx, req)
	}
}

// RecoverStream is RecoverUnary for streams.
func RecoverStream(log hclog.Logger, service string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = panicError(log, service, info.FullMethod, p)
			}
		}()
		return h(srv, ss)
	}
}

func panicError(log hclog.Logger, service, method string, p any) error {
	log.Error("panic in "+service+" call; answered internal", "method", method, "panic", p, "stack", string(debug.Stack()))
	return convert.GRPCStatus(errcode.New(errcode.Internal, "panic in %s: %v", method, p))
}
