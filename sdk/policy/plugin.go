package policy

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

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

// Plugins returns the go-plugin set for a host (impl nil) or a plugin.
func Plugins(impl Policy, log hclog.Logger) plugin.PluginSet {
	return plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl, Log: log}}
}

// GRPCPlugin is the go-plugin glue: the plugin side registers the policy's
// gRPC service, the host side gets a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Policy
	Log  hclog.Logger

	srv *server
}

// GRPCServer registers the policy service on the plugin's gRPC server.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	p.srv = NewServer(p.Impl, p.Log).(*server)
	pb.RegisterPolicyServer(s, p.srv)
	return nil
}

// GRPCClient returns a *Client for the host.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}
