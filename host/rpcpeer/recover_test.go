package rpcpeer

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
)

// A panicking handler answers internal, with the registry code, and the
// interceptor returns normally: the host goes on.
func TestPanicBecomesInternal(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/kvpilot.v1.Control/Apply"}
	resp, err := RecoverUnary(hclog.NewNullLogger(), "control")(context.Background(), nil, info, func(context.Context, any) (any, error) {
		var m map[string]int
		m["boom"]++ // nil map write
		return "unreachable", nil
	})
	if resp != nil || status.Code(err) != codes.Internal || convert.FromGRPCStatus(err).Code != errcode.Internal ||
		!strings.Contains(err.Error(), "panic in /kvpilot.v1.Control/Apply") {
		t.Fatalf("got %v, %v", resp, err)
	}
	serr := RecoverStream(hclog.NewNullLogger(), "control")(nil, nil, &grpc.StreamServerInfo{FullMethod: "/kvpilot.v1.Control/WatchEvents"},
		func(any, grpc.ServerStream) error { panic("stream bug") })
	if status.Code(serr) != codes.Internal || !strings.Contains(serr.Error(), "stream bug") {
		t.Fatalf("stream: %v", serr)
	}
	// Without a panic, the handler's answer passes through.
	resp, err = RecoverUnary(hclog.NewNullLogger(), "control")(context.Background(), nil, info, func(context.Context, any) (any, error) { return "fine", nil })
	if resp != "fine" || err != nil {
		t.Fatalf("got %v, %v", resp, err)
	}
}
