// Package pluginwire is the host's side of the policy plugin protocol: the
// go-plugin handshake and plugin set a host launches plugins with, the
// client that calls a plugin, and the conversion of observations to their
// wire form. A policy author never imports it; package policy holds what an
// author writes against, and its Serve runs the plugin's side.
package pluginwire

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/internal/wire"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// Handshake is the fixed go-plugin handshake every policy plugin answers.
var Handshake = wire.Handshake

// PluginName is the name the policy service is dispensed under.
const PluginName = wire.PluginName

// Plugins returns the go-plugin set a host launches policy plugins with;
// dispensing PluginName yields a *Client.
func Plugins() plugin.PluginSet {
	return plugin.PluginSet{PluginName: &hostPlugin{}}
}

// NewServer returns the plugin-side gRPC service for p, the one Serve runs,
// so that a test harness (sdk/policytest) can run a policy over an
// in-memory connection. A nil log discards.
func NewServer(p policy.Policy, log hclog.Logger) pb.PolicyServer {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return wire.NewServer(p, log)
}

// hostPlugin is the host side of the go-plugin glue.
type hostPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// GRPCServer is the plugin's side, which the host never serves.
func (*hostPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("pluginwire: the host does not serve policies; a plugin uses policy.Serve")
}

// GRPCClient returns a *Client for the host.
func (*hostPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}
