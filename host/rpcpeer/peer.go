// Package rpcpeer holds what the host's two gRPC services on Unix sockets
// (the engine service and the Control service) share: the caller's
// SO_PEERCRED identity attached to each connection, and the interceptors
// that answer a handler's panic as an internal error for that call alone.
package rpcpeer

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/kvpilot/kvpilot/host/uds"
)

// Info is a caller's SO_PEERCRED identity, read once per connection. The
// listener (host/uds) has already checked the uid against the allow-list;
// the services bind claims and tenants to it and name it in the audit log.
type Info struct{ UID, GID, PID int }

// AuthType implements credentials.AuthInfo.
func (Info) AuthType() string { return "peercred" }

// Creds is a gRPC transport "security" that encrypts nothing (a private
// Unix socket needs none: file modes and SO_PEERCRED are the fences) but
// attaches the peer's credentials to the connection. Service names the
// server in handshake errors.
type Creds struct{ Service string }

// ClientHandshake implements credentials.TransportCredentials.
func (Creds) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, Info{UID: -1, GID: -1, PID: -1}, nil
}

// ServerHandshake reads the peer's credentials; a connection that is not
// on a Unix socket is refused.
func (c Creds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("%s: connection from %v is not a Unix socket; the service serves only on its socket", c.Service, conn.RemoteAddr())
	}
	cred, err := uds.PeerCred(uc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: read peer credentials: %w", c.Service, err)
	}
	return conn, Info{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

// Info implements credentials.TransportCredentials.
func (Creds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

// Clone implements credentials.TransportCredentials.
func (c Creds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName implements credentials.TransportCredentials.
func (Creds) OverrideServerName(string) error { return nil }

// Of returns the caller's credentials; ok is false off a socket
// connection (in-process tests with another transport).
func Of(ctx context.Context) (Info, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Info{}, false
	}
	info, ok := p.AuthInfo.(Info)
	return info, ok
}
