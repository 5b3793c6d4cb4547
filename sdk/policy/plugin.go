package policy

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/sdk/policy/internal/wire"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

func init() {
	wire.NewServer = func(p any, log hclog.Logger) pb.PolicyServer { return newServer(p.(Policy), log) }
}

// grpcPlugin is the plugin side of the go-plugin glue: it registers the
// policy's gRPC service. The host side is pluginwire's.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Policy
	log  hclog.Logger

	srv *server
}

// GRPCServer registers the policy service on the plugin's gRPC server.
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	p.srv = newServer(p.impl, p.log)
	pb.RegisterPolicyServer(s, p.srv)
	return nil
}

// GRPCClient is the host's side, which a plugin process never takes.
func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("policy: the plugin side has no client; the host uses pluginwire")
}
