// Package natscmd is the host's NATS command plane: it
// subscribes to this worker's subject (kv-control-<worker_id>) and the
// broadcast subject (kv-control-broadcast), and applies what arrives:
//
//   - the AgenticCommand JSON, one command {"type":"Cache",...}, an
//     array of them, or a turn envelope {"id","source","tenant","directives"}
//     (directive.DecodeTurn), applied all or none;
//   - the router's cache_control JSON {"action":"pin_blocks",...}.
//
// A payload with an "action" key is cache_control; anything else is a turn.
// When the message has a reply subject the host answers it with JSON: the
// executor's TurnReply, or a CacheControlReply. Malformed, oversized and
// hostile payloads are answered with a structured error (sdk/errcode) and
// change nothing; the executor audits them.
//
// Sources. Each command's source, used for the audit log and the per-source
// rate limit, is the first of: the Kvpilot-Source header, the envelope's
// "source", the reply subject without its last token (nats.go gives each
// connection one inbox prefix, so this names the client connection), and
// "anonymous". All are prefixed "nats:", or "nats[<tenant>]:" on a tenant
// subject. NATS does not authenticate these; deployments that need to
// trust them use NATS accounts and permissions on the command subjects.
//
// Tenants. A command acts for the tenant in its Kvpilot-Tenant header, else
// its envelope's "tenant", else the default tenant "": any sender can
// claim any tenant. With nats.tenant_subjects (Config.TenantSubjects) the
// subject decides instead: <worker_subject>.<tenant> and
// <broadcast_subject>.<tenant> act for that tenant only, the bare subjects
// for the default tenant only, and a command claiming another tenant is
// refused with tenant_mismatch; the NATS server's per-user publish
// permissions then decide who may act for which tenant (tenantsubject.go).
// The source on a tenant subject names its tenant, so tenants have their
// own rate-limit buckets.
//
// Broadcast. A cache_control on the broadcast subject naming another worker
// is not for this host and is ignored without a reply, so that the named
// worker's answer is the one a requester gets.
//
// JetStream mode (nats.jetstream_commands). Commands are read from a stream
// over both subjects instead of plain subscriptions: the stream deduplicates
// publishes by Nats-Msg-Id within its duplicate window, and a durable
// consumer per worker keeps its position across host and server restarts.
// In this mode a message's reply subject receives the stream's PubAck; the
// result goes to the inbox in the Kvpilot-Reply header.
//
// At most once, whatever the setting's history (state.go). A command taken
// from the stream is acknowledged, then applied: acknowledged, it is never
// delivered again. One whose ack failed is recorded in Config.StateFile
// before it is applied, and if the stream delivers it again (after a
// restart too) it is acknowledged, not applied. A host started without
// JetStream retires a command stream an earlier run left (stale.go): it
// deletes its consumer and takes its subjects out of the stream (deleting
// the stream when nothing else uses it), so the stream neither answers
// commands in the host's place nor keeps them for a replay; and the next
// start with JetStream replays nothing the stream held before it.
package natscmd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Config configures a Server.
type Config struct {
	// Conn is the host's NATS connection. Required.
	Conn *nats.Conn
	// Ingress applies the commands, audits those refused here for
	// naming a tenant their subject does not act for, and limits commands
	// per source (its ingress.NATS limit: nats.rate_limit). Required.
	Ingress *ingress.Ingress
	// WorkerID is this worker; cache_control requests naming another one
	// are refused on the worker subject and ignored on the broadcast one.
	WorkerID uint64
	// WorkerSubject and BroadcastSubject are the command subjects.
	// Required (config.WorkerSubject() and nats.broadcast_subject).
	WorkerSubject, BroadcastSubject string
	// JetStream reads commands from the durable stream Stream.
	JetStream bool
	// Stream names the command stream (default "KVPILOT_COMMANDS").
	Stream string
	// StreamReplicas is the stream's replicas when this host creates it
	// (default 1).
	StreamReplicas int
	// Durable names this worker's consumer (default "kvpilot-worker-<id>").
	Durable string
	// DuplicateWindow is how long the stream remembers Nats-Msg-Ids
	// (default 2 minutes); MaxAge is how long it keeps commands (default
	// 24 hours).
	DuplicateWindow, MaxAge time.Duration
	// StateFile is where the command plane remembers, across restarts,
	// whether it took commands through JetStream and which ones it applied
	// with their ack failed (state.go). Empty: memory only, so after a
	// restart such a command delivered again is applied again, and a
	// stream left by a run whose clean-up failed may be replayed.
	StateFile string
	// TenantSubjects binds tenants to subjects (see tenantsubject.go):
	// commands are also taken on <WorkerSubject>.<tenant> and
	// <BroadcastSubject>.<tenant> and act for that tenant only; the bare
	// subjects act for the default tenant only.
	TenantSubjects bool
	// Log receives failures; nil discards them.
	Log hclog.Logger
}

// Defaults.
const (
	DefaultStream          = "KVPILOT_COMMANDS"
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultMaxAge          = 24 * time.Hour
	// pending bounds what a plain subscription buffers for a slow host;
	// beyond it NATS drops messages and reports a slow consumer.
	pendingMsgs  = 65536
	pendingBytes = 64 << 20
)

// Server is a running command plane.
type Server struct {
	cfg    Config
	limits directive.Limits
	worker directive.WorkerID

	ctx    context.Context
	cancel context.CancelFunc
	subs   []*nats.Subscription

	iter  jetstream.MessagesContext
	wg    sync.WaitGroup
	state *stateFile

	// gate lets Close wait for plain-subscription callbacks in flight:
	// they hold it shared, Close takes it exclusively and sets closed.
	gate   sync.RWMutex
	closed bool

	closeOnce sync.Once
}

// New checks cfg; Start subscribes.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Conn == nil:
		return nil, errors.New("natscmd: Conn is required")
	case cfg.Ingress == nil:
		return nil, errors.New("natscmd: Ingress is required")
	case cfg.WorkerSubject == "" || cfg.BroadcastSubject == "":
		return nil, errors.New("natscmd: WorkerSubject and BroadcastSubject are required")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Durable == "" {
		cfg.Durable = "kvpilot-worker-" + strconv.FormatUint(cfg.WorkerID, 10)
	}
	if cfg.DuplicateWindow <= 0 {
		cfg.DuplicateWindow = DefaultDuplicateWindow
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		cfg: cfg, limits: cfg.Ingress.Limits(), worker: directive.WorkerID(strconv.FormatUint(cfg.WorkerID, 10)),
		ctx: ctx, cancel: cancel,
	}, nil
}

// Start subscribes to the command subjects, or in JetStream mode makes sure
// the stream and this worker's consumer exist and starts consuming. ctx
// bounds the set-up only.
func (s *Server) Start(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	state, prev, had, err := openState(s.cfg.StateFile)
	if err != nil {
		return err
	}
	s.state = state
	if s.cfg.JetStream {
		if err := s.startJetStream(ctx, prev, had); err != nil {
			s.Close()
			return err
		}
		return nil
	}
	if err := s.state.save(commandState{JetStream: false}); err != nil {
		s.cfg.Log.Warn("command plane state not saved; a later start with nats.jetstream_commands relies on this run's clean-up alone", "error", err)
	}
	for _, sub := range s.subjects() {
		ns, err := s.cfg.Conn.Subscribe(sub, s.onCore)
		if err != nil {
			s.Close()
			return fmt.Errorf("natscmd: subscribe %s: %w", sub, err)
		}
		if err := ns.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
			s.Close()
			return fmt.Errorf("natscmd: pending limits on %s: %w", sub, err)
		}
		s.subs = append(s.subs, ns)
	}
	// Make sure the server has the interest before the caller publishes.
	if err := s.cfg.Conn.FlushWithContext(ctx); err != nil {
		s.Close()
		return fmt.Errorf("natscmd: flush subscriptions: %w", err)
	}
	s.cfg.Log.Info("NATS command plane subscribed", "subjects", s.subjects())
	s.retireStream(ctx)
	return nil
}

// subjects are the command subjects, once each (they may be configured
// equal), with the tenant subjects' wildcards when those are on.
func (s *Server) subjects() []string {
	subs := []string{s.cfg.WorkerSubject, s.cfg.BroadcastSubject}
	if s.cfg.WorkerSubject == s.cfg.BroadcastSubject {
		subs = subs[:1]
	}
	if s.cfg.TenantSubjects {
		for _, base := range subs {
			subs = append(subs, TenantSubject(base, "*"))
		}
	}
	return subs
}

// Close unsubscribes (or stops consuming) and waits for the command being
// applied, if any. It is idempotent.
func (s *Server) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		for _, sub := range s.subs {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
				errs = append(errs, fmt.Errorf("natscmd: unsubscribe %s: %w", sub.Subject, err))
			}
		}
		s.gate.Lock()
		s.closed = true
		s.gate.Unlock()
		if s.iter != nil {
			s.iter.Stop()
		}
		s.wg.Wait()
		s.cancel()
	})
	return errors.Join(errs...)
}

// onCore handles a plain-subscription message: the answer goes to its
// reply subject, or to the Kvpilot-Reply header's inbox.
func (s *Server) onCore(m *nats.Msg) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return
	}
	in := incoming{data: m.Data, header: m.Header, inbox: m.Reply}
	s.arrived(m.Subject, &in)
	out := s.handle(s.ctx, in)
	if out == nil {
		return
	}
	to := m.Reply
	if to == "" {
		to = m.Header.Get(headerReply)
	}
	s.respond(to, out)
}

func (s *Server) respond(to string, out []byte) {
	if to == "" {
		return
	}
	if err := s.cfg.Conn.Publish(to, out); err != nil {
		s.cfg.Log.Warn("command result not sent", "reply", to, "error", err)
	}
}
