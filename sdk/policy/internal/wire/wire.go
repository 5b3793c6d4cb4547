// Package wire holds what both sides of the policy plugin protocol share
// and a policy author never needs: the go-plugin handshake, the name the
// service is dispensed under, and the hook through which pluginwire (above
// package policy) reaches the plugin-side server that lives in policy,
// because Serve runs it. The hook breaks the import cycle the way grpc's
// own internal package does: policy sets it in init, and pluginwire imports
// policy, so it is set before pluginwire can read it.
package wire

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// Handshake is the fixed go-plugin handshake between the host and every
// policy plugin. ProtocolVersion never changes: the application API version
// is negotiated in Info instead, so that one host can run plugins built
// against several SDK releases.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "KVPILOT_POLICY_PLUGIN",
	MagicCookieValue: "7f3c1e9a5b2d4086a1c3e5f7092b4d6e",
}

// PluginName is the name the policy service is dispensed under.
const PluginName = "policy"

// NewServer returns the gRPC service for a policy.Policy (typed any here,
// since this package sits below policy). Package policy sets it.
var NewServer func(p any, log hclog.Logger) pb.PolicyServer
