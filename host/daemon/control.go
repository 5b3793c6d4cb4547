package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/control/plane"
	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/uds"
)

// buildControl binds the Control socket and starts taking NATS commands
// (the executor is ready, so commands apply from here on). Serving the
// socket and publishing events wait for runControl. Call it after
// buildCore.
func (d *Daemon) buildControl() error {
	c := &d.core
	p, err := plane.New(context.Background(), plane.Config{
		Socket: uds.Options{
			Path:      d.cfg.ControlSocket(),
			Group:     d.cfg.Control.Group,
			AllowUIDs: d.cfg.Control.AllowUIDs,
			Log:       d.log.Named("control"),
		},
		Ingress:           c.in,
		Index:             c.index,
		Events:            c.events,
		NATS:              c.nats.Conn(),
		WorkerID:          d.cfg.WorkerID,
		DPRank:            d.cfg.Events.DPRank,
		EventsSubject:     d.cfg.EventsSubject(),
		EventsFormat:      publish.Format(d.cfg.Events.Format),
		EventsPublisherID: d.cfg.Events.PublisherID,
		WorkerSubject:     d.cfg.WorkerSubject(),
		BroadcastSubject:  d.cfg.NATS.BroadcastSubject,
		JetStream:         d.cfg.NATS.JetStreamCommands,
		Stream:            d.cfg.NATS.CommandStream,
		StreamReplicas:    d.cfg.NATS.CommandReplicas,
		CommandState:      filepath.Join(d.cfg.DataDir, "nats-commands.state"),
		TenantSubjects:    d.cfg.NATS.TenantSubjects,
		// The Control socket's tenant binding; the ingress limits and
		// audits (core.go).
		ControlTenants: d.cfg.Control.TenantsOf,
		// Page bytes are those of the open pools' layout (0 until an
		// engine registers one, when no model is configured).
		BytesPerPage: d.BytesPerPage,
		Sessions:     d.sessionCount,
		Saved:        d.savedMeta,
		Metrics:      d.metrics,
		Log:          d.log,
	})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	d.control = p
	d.closers = append(d.closers, p.Close)
	return d.listInDynamoDiscovery(p)
}

// listInDynamoDiscovery lists the event publisher in Dynamo's file
// discovery store, when one is configured, so Dynamo's router takes its
// events; the entry goes when the host stops.
func (d *Daemon) listInDynamoDiscovery(p *plane.Plane) error {
	ev := d.cfg.Events
	if ev.DynamoFileKV == "" || ev.Format != config.EventsDynamo || p.Publisher() == nil {
		return nil
	}
	src := publish.DynamoSource{Namespace: ev.Namespace, Component: ev.Component, Endpoint: ev.Endpoint,
		PublisherID: p.Publisher().PublisherID(), WorkerID: d.cfg.WorkerID, DPRank: ev.DPRank}
	unlist, err := publish.RegisterFileDiscovery(ev.DynamoFileKV, src)
	if err != nil {
		return fmt.Errorf("events.dynamo_file_kv: %w", err)
	}
	d.log.Info("KV event publisher listed in Dynamo's file discovery", "dir", ev.DynamoFileKV,
		"publisher_id", src.PublisherID, "worker_id", src.WorkerID, "dp_rank", src.DPRank)
	if others := publish.OtherSources(ev.DynamoFileKV, src); len(others) > 0 {
		d.log.Warn("another KV event source is listed for this Dynamo worker; Dynamo's router may take "+
			"neither's events: remove the stale entry or run one publisher per worker",
			"worker_id", src.WorkerID, "dp_rank", src.DPRank, "other_publisher_ids", others)
	}
	d.closers = append(d.closers, unlist)
	return nil
}

// runControl serves the Control socket and publishes KV events until ctx
// ends; wg is done once queued events are published and calls have ended.
func (d *Daemon) runControl(ctx context.Context, wg *sync.WaitGroup) {
	p := d.controlPlane()
	if p == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.Run(ctx); err != nil {
			d.log.Error("control plane stopped with an error", "error", err)
		}
	}()
}

// ControlSocket is the path the Control service listens on, or "" when
// the control plane is not built.
func (d *Daemon) ControlSocket() string {
	if p := d.controlPlane(); p != nil {
		return p.SocketPath()
	}
	return ""
}

func (d *Daemon) controlPlane() *plane.Plane { return d.control }

// eventPublisher is the KV event publisher, or nil without a control plane.
func (d *Daemon) eventPublisher() *publish.Publisher {
	if p := d.controlPlane(); p != nil {
		return p.Publisher()
	}
	return nil
}
