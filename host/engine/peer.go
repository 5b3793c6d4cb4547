package engine

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
)

// peerInfo is the caller's SO_PEERCRED identity, read once per connection.
// The listener (host/uds) already checked the uid against the allow-list;
// the service binds descriptor claims to it and names it in the audit log.
type peerInfo struct{ UID, GID, PID int }

func (peerInfo) AuthType() string { return "peercred" }

// peerCreds is a gRPC transport "security" that encrypts nothing (a private
// Unix socket needs no encryption) but attaches the peer's credentials.
type peerCreds struct{}

func (peerCreds) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, peerInfo{UID: -1, GID: -1, PID: -1}, nil
}

func (peerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("engine: connection from %v is not a Unix socket", c.RemoteAddr())
	}
	cred, err := uds.PeerCred(uc)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: read peer credentials: %w", err)
	}
	return c, peerInfo{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}
func (peerCreds) Clone() credentials.TransportCredentials { return peerCreds{} }
func (peerCreds) OverrideServerName(string) error         { return nil }

// peerOf returns the caller's credentials; ok is false off a socket.
func peerOf(ctx context.Context) (peerInfo, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return peerInfo{}, false
	}
	info, ok := p.AuthInfo.(peerInfo)
	return info, ok
}

// recoverUnary answers a handler's panic as an internal error for that call
// alone: a bug in one request must not take the host and its engine down.
func recoverUnary(log hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, panicError(log, info.FullMethod, p)
			}
		}()
		return h(ctx, req)
	}
}

func recoverStream(log hclog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = panicError(log, info.FullMethod, p)
			}
		}()
		return h(srv, ss)
	}
}

func panicError(log hclog.Logger, method string, p any) error {
	log.Error("panic in engine call; answered internal", "method", method, "panic", p, "stack", string(debug.Stack()))
	return convert.GRPCStatus(errcode.New(errcode.Internal, "panic in %s: %v", method, p))
}
