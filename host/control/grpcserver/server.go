// Package grpcserver serves kvpilot.v1.Control on the host's Unix socket:
// Apply (a turn of directives, all or none), CacheControl (the router's
// cache_control API), Stats (per tier: pages, bytes, pinned, leased) and
// WatchEvents (the KV events, in order).
//
// The listener comes from host/uds, which keeps the socket private and
// refuses peers whose uid is not allowed; this server reads each accepted
// connection's SO_PEERCRED once and records the uid as the source of every
// directive it applies. It is a door over host/ingress, which counts,
// audits and applies what it is handed and limits calls per peer uid;
// an interceptor turns a panic in a handler into an internal error
// instead of a crashed host. Request size is bounded by the executor's
// payload limit.
//
// A uid that control.tenants binds acts only for its tenants
// (TenantBinding): Apply and CacheControl for another tenant are refused
// with permission_denied in the response and audited; Stats and
// WatchEvents see only its tenants' pages and events.
package grpcserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/rpcpeer"
	"github.com/kvpilot/kvpilot/sdk/directive"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// Config configures a Server.
type Config struct {
	// Ingress applies turns and cache_control requests, and rate-limits
	// every call per peer uid (its ingress.Socket limit:
	// control.rate_limit). Required.
	Ingress *ingress.Ingress
	// Index answers Stats, under the lock the executor takes. Required.
	Index *guarded.Index
	// Hub feeds WatchEvents; nil answers WatchEvents with unavailable.
	Hub *publish.Hub
	// WatchBuffer is the events one watcher may have waiting before its
	// stream is ended with RESOURCE_EXHAUSTED (default
	// publish.DefaultWatchBuffer).
	WatchBuffer int
	// WorkerID is reported by Stats.
	WorkerID uint64
	// BytesPerPage gives a page's size in bytes for Stats. It is unknown
	// until an engine registers its layout; nil or 0 reports bytes as 0.
	BytesPerPage func() int64
	// Sessions counts the sessions the engine service remembers, of one
	// tenant or (all) of every tenant, for Stats; nil reports 0.
	Sessions func(tenant string, all bool) int
	// Saved reports the pins and leases saved before a
	// restart that are not restored yet (ok false once they are), of one
	// tenant or all, for Stats; nil: none.
	Saved func(tenant string, all bool) (pins, leases int, ok bool)
	// MaxRecvBytes bounds one request (default: the executor's payload
	// limit, 1 MiB unless configured). MaxSendBytes bounds one response
	// (default 16 MiB: a refused turn of many directives is long).
	MaxRecvBytes, MaxSendBytes int
	// Tenants binds peer uids to the tenants they may act for
	// (config.Control.TenantsOf); nil binds nobody. See TenantBinding.
	Tenants func(uid int) (tenants []string, bound bool)
	// Log receives panics and shutdown notes; nil discards them.
	Log hclog.Logger
}

// Server is the Control service.
type Server struct {
	pb.UnimplementedControlServer
	cfg     Config
	limits  directive.Limits
	binding TenantBinding
	worker  string
	grpc    *grpc.Server

	stopOnce sync.Once
	done     chan struct{} // closed by Stop: ends WatchEvents streams
}

// New checks cfg and builds the server; Serve starts it.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Ingress == nil:
		return nil, errors.New("grpcserver: Ingress is required")
	case cfg.Index == nil:
		return nil, errors.New("grpcserver: Index is required (for Stats)")
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	limits := cfg.Ingress.Limits()
	if cfg.MaxRecvBytes <= 0 {
		cfg.MaxRecvBytes = limits.MaxPayload
		if cfg.MaxRecvBytes <= 0 {
			cfg.MaxRecvBytes = directive.DefaultMaxPayload
		}
	}
	if cfg.MaxSendBytes <= 0 {
		cfg.MaxSendBytes = 16 << 20
	}
	s := &Server{cfg: cfg, limits: limits, worker: strconv.FormatUint(cfg.WorkerID, 10), done: make(chan struct{}),
		binding: TenantBinding{Of: cfg.Tenants}}
	// Interceptors run outermost first: the rate limit, then the
	// recovery, innermost, next to the handlers it guards. The ingress
	// counts directives, so no interceptor does.
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if cfg.Ingress.Limited(ingress.Socket) {
		unary = append(unary, s.limitUnary)
		stream = append(stream, s.limitStream)
	}
	unary = append(unary, rpcpeer.RecoverUnary(cfg.Log, "control"))
	stream = append(stream, rpcpeer.RecoverStream(cfg.Log, "control"))
	s.grpc = grpc.NewServer(
		grpc.Creds(rpcpeer.Creds{Service: "control"}),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.MaxSendMsgSize(cfg.MaxSendBytes),
		// Local callers on a socket: no connection should hog the host,
		// and a fixed worker pool avoids a goroutine start per call.
		grpc.MaxConcurrentStreams(1024),
		grpc.NumStreamWorkers(4),
		// Fixed windows turn off gRPC's bandwidth-delay probing, which
		// sends a ping per message on an idle connection: on a local
		// socket it only adds latency.
		grpc.InitialWindowSize(1<<20),
		grpc.InitialConnWindowSize(4<<20),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)
	pb.RegisterControlServer(s.grpc, s)
	return s, nil
}

// GRPC is the underlying server, for registering more services on the
// same socket.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve accepts connections on ln until Stop. It returns nil after Stop.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket %v: %w", ln.Addr(), err)
	}
	return nil
}

// Stop ends watch streams, lets calls in flight finish for up to grace,
// then closes every connection and the listener.
func (s *Server) Stop(grace time.Duration) {
	s.stopOnce.Do(func() { close(s.done) })
	finished := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(grace):
		s.cfg.Log.Warn("control calls still running at shutdown; closing them", "grace", grace)
		s.grpc.Stop()
		<-finished
	}
}
