// Package plane assembles the control plane over the host's one ingress:
// the Control service on its private Unix socket, the NATS command plane,
// and the event publisher that feeds NATS and WatchEvents. The daemon
// builds it from its configuration; tests build one from parts, with an
// ingress of their own.
//
//	p, err := plane.New(ctx, plane.Config{...})   // binds, subscribes
//	go p.Run(ctx)                                 // serves until ctx ends
package plane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/kvpilot/kvpilot/host/control/grpcserver"
	"github.com/kvpilot/kvpilot/host/control/natscmd"
	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/uds"
)

// Config gathers what the control plane needs from the host.
type Config struct {
	// Socket places the Control socket and names who may connect.
	Socket uds.Options
	// Ingress is the host's one way in, where the socket's and NATS's
	// directives go (it rate-limits each door, audits and counts).
	// Required.
	Ingress *ingress.Ingress
	// Index is the host's cache index, for Stats and the events' tenant
	// filter. Required.
	Index *guarded.Index
	// Events is the index's event queue; nil publishes no events.
	Events *events.Queue
	// NATS is the host's connection; nil runs the socket only.
	NATS *nats.Conn
	// WorkerID and DPRank identify this worker in events and subjects.
	WorkerID uint64
	DPRank   uint32
	// EventsSubject is config's EventsSubject(), matching EventsFormat.
	EventsSubject string
	// EventsFormat is the events' wire format; "" is JSON.
	EventsFormat publish.Format
	// EventsPublisherID is the publisher_id of Dynamo's envelope; 0 picks
	// a random one.
	EventsPublisherID uint64
	// WorkerSubject and BroadcastSubject receive commands.
	WorkerSubject, BroadcastSubject string
	// JetStream, Stream: durable, deduplicated commands (natscmd).
	JetStream bool
	Stream    string
	// StreamReplicas is the command stream's replicas when it is created.
	StreamReplicas int
	// CommandState is the command plane's state file (natscmd
	// Config.StateFile): no command applied twice across restarts.
	CommandState string
	// TenantSubjects binds tenants to command subjects (natscmd;
	// nats.tenant_subjects).
	TenantSubjects bool
	// ControlTenants binds Control socket peer uids to the tenants they
	// may act for (config.Control.TenantsOf); nil binds nobody.
	ControlTenants func(uid int) (tenants []string, bound bool)
	// BytesPerPage for Stats (nil: bytes read 0 until layouts exist).
	BytesPerPage func() int64
	// Sessions for Stats (nil: 0).
	Sessions func(tenant string, all bool) int
	// Saved for Stats (nil: none).
	Saved func(tenant string, all bool) (pins, leases int, ok bool)
	// WatchBuffer per WatchEvents stream (0: default).
	WatchBuffer int
	// Metrics receives the event publisher's counts; nil: none.
	Metrics *metrics.Metrics
	// Log; nil discards.
	Log hclog.Logger
}

// Plane is a built control plane.
type Plane struct {
	cfg  Config
	ln   *uds.Listener
	srv  *grpcserver.Server
	pub  *publish.Publisher
	hub  *publish.Hub
	cmds *natscmd.Server

	runOnce   sync.Once
	closeOnce sync.Once
	closeErr  error
}

// New binds the socket and, when NATS is set, starts taking commands on it
// (they are applied from then on; the executor is ready). Serving the
// socket and publishing events wait for Run.
func New(ctx context.Context, cfg Config) (*Plane, error) {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Socket.Log == nil {
		cfg.Socket.Log = cfg.Log
	}
	if cfg.Ingress == nil {
		return nil, errors.New("control plane: Ingress is required")
	}
	p := &Plane{cfg: cfg, hub: publish.NewHub()}
	var err error
	if cfg.Events != nil {
		p.pub, err = publish.New(publish.Config{Conn: cfg.NATS, Subject: cfg.EventsSubject, Format: cfg.EventsFormat, PublisherID: cfg.EventsPublisherID, WorkerID: cfg.WorkerID,
			DPRank: cfg.DPRank, Hub: p.hub, Metrics: cfg.Metrics, Log: cfg.Log.Named("events")})
		if err != nil {
			return nil, err
		}
	}
	p.srv, err = grpcserver.New(grpcserver.Config{
		Ingress: cfg.Ingress, Index: cfg.Index, Hub: p.hub, WatchBuffer: cfg.WatchBuffer,
		WorkerID: cfg.WorkerID, BytesPerPage: cfg.BytesPerPage, Sessions: cfg.Sessions, Saved: cfg.Saved, Log: cfg.Log.Named("control"),
		Tenants: cfg.ControlTenants,
	})
	if err != nil {
		return nil, err
	}
	p.ln, err = uds.Listen(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("control.socket: %w", err)
	}
	if cfg.NATS != nil {
		p.cmds, err = natscmd.New(natscmd.Config{
			Conn: cfg.NATS, Ingress: cfg.Ingress, WorkerID: cfg.WorkerID,
			WorkerSubject: cfg.WorkerSubject, BroadcastSubject: cfg.BroadcastSubject,
			JetStream: cfg.JetStream, Stream: cfg.Stream, StreamReplicas: cfg.StreamReplicas, StateFile: cfg.CommandState,
			Log:            cfg.Log.Named("natscmd"),
			TenantSubjects: cfg.TenantSubjects,
		})
		if err == nil {
			err = p.cmds.Start(ctx)
		}
		if err != nil {
			p.ln.Close()
			return nil, fmt.Errorf("nats command plane: %w", err)
		}
	}
	return p, nil
}

// SocketPath is the Control socket's path.
func (p *Plane) SocketPath() string { return p.ln.Path() }

// Hub is where in-process watchers subscribe to events.
func (p *Plane) Hub() *publish.Hub { return p.hub }

// Publisher is the event publisher, or nil without an event queue.
func (p *Plane) Publisher() *publish.Publisher { return p.pub }

// Run serves the socket and publishes events until ctx ends, then stops
// taking commands, lets calls in flight finish (2 s at most), publishes the
// events left in the queue and returns. It runs once.
func (p *Plane) Run(ctx context.Context) error {
	var err error
	p.runOnce.Do(func() { err = p.run(ctx) })
	return err
}

func (p *Plane) run(ctx context.Context) error {
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); serveErr <- p.srv.Serve(p.ln) }()
	if p.pub != nil {
		wg.Add(1)
		go func() { defer wg.Done(); p.pub.Run(ctx, p.cfg.Events) }()
	}
	p.cfg.Log.Info("control plane serving", "socket", p.ln.Path(), "nats_commands", p.cmds != nil, "events", p.cfg.EventsSubject)
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		if err != nil {
			p.cfg.Log.Error("control socket stopped", "error", err)
		}
	}
	closeErr := p.Close()
	wg.Wait()
	return errors.Join(err, closeErr)
}

// Close stops everything; Run calls it, and a Plane that never ran must be
// closed. It is idempotent. Events still queued are published by Run's
// publisher as it returns, not by Close.
func (p *Plane) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		if p.cmds != nil {
			errs = append(errs, p.cmds.Close())
		}
		p.srv.Stop(2 * time.Second) // closes the listener too
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("close control socket: %w", err))
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
