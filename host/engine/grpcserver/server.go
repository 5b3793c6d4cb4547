// Package grpcserver serves kvpilot.v1.Engine, the protocol an inference
// engine speaks with its host over a Unix socket: the RPC adapter of the
// engine service (host/engine). It takes proto in and gives proto out, and
// holds what only the transport knows: the caller's uid (host/rpcpeer),
// the checks of the wire's own form (API version, layout, names), the
// mapping of errors to gRPC statuses, the panic guards, the call counts,
// and the descriptor side channel that hands a registration's memfd
// descriptors to the engine (fdserver.go; gRPC cannot carry descriptors).
// What a call does is host/engine's.
package grpcserver

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Config configures a Server.
type Config struct {
	// Engine is the engine service the calls go to. Required.
	Engine *engine.Service
	// FDSocket is the descriptor side channel's path, told to engines.
	FDSocket string
	// WorkerID is reported at registration.
	WorkerID string
	// Metrics receives engine call counts; nil: none.
	Metrics *metrics.Metrics
	// Log; nil discards.
	Log hclog.Logger
}

// Server serves the Engine protocol for an engine service.
type Server struct {
	pb.UnimplementedEngineServer
	cfg  Config
	eng  *engine.Service
	grpc *grpc.Server
	fds  *fdServer
}

// New builds the server; Serve and ServeFDs start it.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("engine server: Engine is required")
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	s := &Server{cfg: cfg, eng: cfg.Engine}
	s.fds = newFDServer(cfg.Engine.Live, cfg.Log.Named("fds"))
	// Counting sits outside recovery, so a panic counts as internal.
	unary := []grpc.UnaryServerInterceptor{rpcpeer.RecoverUnary(cfg.Log, "engine")}
	stream := []grpc.StreamServerInterceptor{rpcpeer.RecoverStream(cfg.Log, "engine")}
	if cfg.Metrics != nil {
		unary = append([]grpc.UnaryServerInterceptor{countUnary(cfg.Metrics)}, unary...)
		stream = append([]grpc.StreamServerInterceptor{countStream(cfg.Metrics)}, stream...)
	}
	s.grpc = grpc.NewServer(
		grpc.Creds(rpcpeer.Creds{Service: "engine"}),
		grpc.MaxRecvMsgSize(64<<20), // a 1M-token prompt is 4 MiB of tokens; leave room
		grpc.MaxSendMsgSize(64<<20),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)
	pb.RegisterEngineServer(s.grpc, s)
	return s, nil
}

// Serve answers gRPC on ln (the engine socket) until Stop.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return fmt.Errorf("engine socket %v: %w", ln.Addr(), err)
}

// ServeFDs answers descriptor claims on ln (the side channel) until ln
// is closed.
func (s *Server) ServeFDs(ln net.Listener) error { return s.fds.serve(ln) }

// Stop ends fill streams, lets calls finish for up to grace, then closes
// every connection. It does not close the pools (the engine service's
// Close does).
func (s *Server) Stop(grace time.Duration) {
	s.eng.EndFillStreams()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.grpc.Stop()
		<-done
	}
	s.fds.close()
}

// status is err as the gRPC status a client reads its registry code from.
func status(err error) error { return convert.GRPCStatus(errcode.From(err)) }
