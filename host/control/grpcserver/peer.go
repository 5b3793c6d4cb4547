package grpcserver

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// PeerInfo is a caller's SO_PEERCRED identity, attached to every RPC on the
// connection. The listener (host/uds) has already checked the uid against
// the allow-list; the server records it as the directive's source.
type PeerInfo struct {
	UID, GID, PID int
}

// AuthType implements credentials.AuthInfo.
func (PeerInfo) AuthType() string { return "peercred" }

// peerCreds is a transport "security" that adds no encryption (a Unix
// socket needs none: file modes and SO_PEERCRED are the fences) but reads
// the peer's credentials once per connection, where gRPC lets a server
// attach them to the connection.
type peerCreds struct{}

func (peerCreds) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, PeerInfo{UID: -1, GID: -1, PID: -1}, nil
}

func (peerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("control: connection from %v is not a Unix socket; the Control service serves only on its socket", c.RemoteAddr())
	}
	cred, err := uds.PeerCred(uc)
	if err != nil {
		return nil, nil, fmt.Errorf("control: read peer credentials: %w", err)
	}
	return c, PeerInfo{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}
func (peerCreds) Clone() credentials.TransportCredentials { return peerCreds{} }
func (peerCreds) OverrideServerName(string) error         { return nil }

// peerOf returns the caller's credentials, or ok false outside a socket
// connection (in-process tests with another transport).
func peerOf(ctx context.Context) (PeerInfo, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return PeerInfo{}, false
	}
	info, ok := p.AuthInfo.(PeerInfo)
	return info, ok
}

// uidOf is the caller's uid, or -1 outside a socket connection (which a
// tenant binding refuses: an unknown caller is bound to nothing).
func uidOf(ctx context.Context) int {
	if p, ok := peerOf(ctx); ok {
		return p.UID
	}
	return -1
}

// sourceOf is the audit log's "who": the verified uid, plus the name the
// caller gives itself in metadata (unverified, so it only follows the uid).
func sourceOf(ctx context.Context) string {
	src := "uds:uid=?"
	if p, ok := peerOf(ctx); ok {
		src = fmt.Sprintf("uds:uid=%d", p.UID)
	}
	if name := metadataValue(ctx, controlclient.MetadataSource); name != "" {
		src += ":" + name
	}
	return src
}

// metadataValue returns a short printable metadata value, or "" when it is
// absent or unfit for logs and labels.
func metadataValue(ctx context.Context, key string) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	vs := md.Get(key)
	if len(vs) == 0 || len(vs[0]) > 64 {
		return ""
	}
	for _, r := range vs[0] {
		if r <= ' ' || r > '~' {
			return ""
		}
	}
	return vs[0]
}
