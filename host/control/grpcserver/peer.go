package grpcserver

import (
	"context"
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// uidOf is the caller's uid, or -1 outside a socket connection (which a
// tenant binding refuses: an unknown caller is bound to nothing).
func uidOf(ctx context.Context) int {
	if p, ok := rpcpeer.Of(ctx); ok {
		return p.UID
	}
	return -1
}

// sourceOf is the audit log's "who": the verified uid, plus the name the
// caller gives itself in metadata (unverified, so it only follows the uid).
func sourceOf(ctx context.Context) string {
	src := "uds:uid=?"
	if p, ok := rpcpeer.Of(ctx); ok {
		src = "uds:uid=" + strconv.Itoa(p.UID)
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
