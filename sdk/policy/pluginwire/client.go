package pluginwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// Client is the host's side of the protocol: it calls a policy plugin.
type Client struct {
	rpc pb.PolicyClient
}

// NewClient wraps a connection to a policy plugin.
func NewClient(conn grpc.ClientConnInterface) *Client { return &Client{rpc: pb.NewPolicyClient(conn)} }

// ErrNoCommonVersion is returned when host and plugin share no application
// API version.
var ErrNoCommonVersion = errors.New("policy: host and plugin share no application API version")

// Negotiated is a plugin's Info after version negotiation.
type Negotiated struct {
	policy.Info
	// APIVersion is the version both sides speak.
	APIVersion uint32
}

// Info asks the plugin who it is and negotiates the API version. It fails
// with ErrNoCommonVersion when there is none, and when the plugin's answer
// is unusable.
func (c *Client) Info(ctx context.Context, hostVersions []uint32) (Negotiated, error) {
	r, err := c.rpc.Info(ctx, &pb.InfoRequest{HostApiVersions: hostVersions, TypedDirectives: true})
	if err != nil {
		return Negotiated{}, fmt.Errorf("info: %w", err)
	}
	n := Negotiated{
		Info: policy.Info{Name: r.GetName(), Version: r.GetVersion(), APIVersions: r.GetPluginApiVersions(),
			Subscriptions: kindsFromProto(r.GetSubscriptions())},
		APIVersion: r.GetApiVersion(),
	}
	switch {
	case n.APIVersion == 0:
		return n, fmt.Errorf("plugin %q speaks API versions %v, host %v: %w", n.Name, n.APIVersions, hostVersions, ErrNoCommonVersion)
	case n.Name == "":
		return n, fmt.Errorf("plugin answered Info without a name")
	}
	for _, k := range n.Subscriptions {
		if !k.Valid() {
			return n, fmt.Errorf("plugin %q subscribes to unknown kind %v", n.Name, k)
		}
	}
	return n, nil
}

// Configure hands the plugin its params.
func (c *Client) Configure(ctx context.Context, params json.RawMessage, version uint32) error {
	if _, err := c.rpc.Configure(ctx, &pb.ConfigureRequest{ParamsJson: params, ApiVersion: version}); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return nil
}

// Result is a policy's answer to one observation. Err is the policy's own
// error, or a directive it returned that does not decode; Directives is
// then empty, because a turn is applied whole or not at all.
type Result struct {
	Directives []directive.Directive
	// Tenants, when not nil, is parallel to Directives: the tenant each acts
	// for, "" meaning the observation's.
	Tenants []string
	Err     error
}

// Observe delivers observations in order and returns one result each. An
// error means the call itself failed (the plugin died, hung past ctx's
// deadline, or answered with the wrong number of replies): none of the
// observations can be taken as delivered.
func (c *Client) Observe(ctx context.Context, obs []*pb.Observation) ([]Result, error) {
	r, err := c.rpc.Observe(ctx, &pb.ObserveRequest{Observations: obs})
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	if len(r.GetReplies()) != len(obs) {
		return nil, fmt.Errorf("observe: %d replies to %d observations", len(r.GetReplies()), len(obs))
	}
	out := make([]Result, len(obs))
	for i, rep := range r.GetReplies() {
		out[i] = decodeReply(rep)
	}
	return out, nil
}

// decodeReply turns a plugin's answer into directives, all or none. Typed
// directives are read when present; a plugin built with an older SDK sends
// JSON objects instead, decoded with the same strict checks.
func decodeReply(rep *pb.Reply) Result {
	if e := rep.GetError(); e != "" {
		return Result{Err: fmt.Errorf("policy: %s", e)}
	}
	n := len(rep.GetDirectives())
	if n == 0 {
		n = len(rep.GetDirectivesJson())
	}
	tenants := rep.GetTenants()
	if len(tenants) != 0 && len(tenants) != n {
		return Result{Err: fmt.Errorf("reply names %d tenants for %d directives", len(tenants), n)}
	}
	ds := make([]directive.Directive, n)
	for i := range ds {
		d, err := replyDirective(rep, i)
		if err != nil {
			return Result{Err: fmt.Errorf("directive %d: %w", i, err)}
		}
		ds[i] = d
	}
	if len(tenants) == 0 {
		tenants = nil
	}
	return Result{Directives: ds, Tenants: tenants}
}

func replyDirective(rep *pb.Reply, i int) (directive.Directive, error) {
	if typed := rep.GetDirectives(); len(typed) != 0 {
		return directive.FromProto(typed[i])
	}
	return directive.DecodeCommand(rep.GetDirectivesJson()[i], directive.Limits{})
}
