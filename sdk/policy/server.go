package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// server adapts a Policy to the gRPC service. One mutex serializes every
// call into the policy, which is the promise Policy documents.
type server struct {
	pb.UnimplementedPolicyServer
	p   Policy
	log hclog.Logger

	mu      sync.Mutex
	version uint32
	typed   bool // the host reads typed directives
}

// newServer returns the gRPC service for p. Serve runs it; pluginwire
// reaches it through internal/wire, so that sdk/policytest can run a policy
// over an in-memory connection.
func newServer(p Policy, log hclog.Logger) *server {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &server{p: p, log: log}
}

func (s *server) Info(_ context.Context, req *pb.InfoRequest) (*pb.InfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.p.Info()
	versions := info.APIVersions
	if len(versions) == 0 {
		versions = []uint32{APIVersion}
	}
	v := negotiate(req.GetHostApiVersions(), versions)
	s.version = v
	s.typed = req.GetTypedDirectives()
	return &pb.InfoResponse{
		Name: info.Name, Version: info.Version, ApiVersion: v,
		PluginApiVersions: versions, Subscriptions: kindsToProto(info.Subscriptions),
	}, nil
}

func (s *server) Configure(_ context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	params := json.RawMessage(req.GetParamsJson())
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if err := s.safeConfigure(params); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.ConfigureResponse{}, nil
}

func (s *server) Observe(ctx context.Context, req *pb.ObserveRequest) (*pb.ObserveResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &pb.ObserveResponse{Replies: make([]*pb.Reply, 0, len(req.GetObservations()))}
	for _, po := range req.GetObservations() {
		o, err := fromProto(po)
		var ds []Directive
		if err == nil {
			ds, err = s.safeObserve(ctx, o)
		}
		if err != nil {
			s.log.Warn("observe failed", "seq", po.GetSeq(), "session", po.GetSession(), "error", err)
		}
		r, err := replyToProto(ds, err, s.typed)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.Replies = append(resp.Replies, r)
	}
	return resp, nil
}

// safeConfigure and safeObserve turn a policy's panic into an error for
// that one call: the host counts it, and the plugin keeps its state.
func (s *server) safeConfigure(params json.RawMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("configure panicked: %v", r)
			s.log.Error("configure panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return s.p.Configure(params)
}

func (s *server) safeObserve(ctx context.Context, o Observation) (ds []Directive, err error) {
	defer func() {
		if r := recover(); r != nil {
			ds, err = nil, fmt.Errorf("observe panicked: %v", r)
			s.log.Error("observe panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return s.p.Observe(ctx, o)
}

// close calls the policy's optional Close.
func (s *server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.p.(Closer); ok {
		return c.Close()
	}
	return nil
}

// negotiate returns the highest version present in both lists, or 0.
func negotiate(host, plugin []uint32) uint32 {
	if len(plugin) == 0 {
		plugin = []uint32{APIVersion}
	}
	var best uint32
	for _, h := range host {
		for _, p := range plugin {
			if h == p && h > best {
				best = h
			}
		}
	}
	return best
}
