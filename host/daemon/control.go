package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvpilot/kvpilot/host/control/plane"
	"github.com/kvpilot/kvpilot/host/control/publish"
	"github.com/kvpilot/kvpilot/host/events"
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
		Executor:         c.exec,
		Index:            c.index,
		Lock:             &c.mu,
		Events:           c.events,
		NATS:             c.nats.Conn(),
		WorkerID:         d.cfg.WorkerID,
		DPRank:           d.cfg.Events.DPRank,
		EventsSubject:    events.Subject(d.cfg.Events.Namespace, d.cfg.Events.Component),
		WorkerSubject:    d.cfg.WorkerSubject(),
		BroadcastSubject: d.cfg.NATS.BroadcastSubject,
		JetStream:        d.cfg.NATS.JetStreamCommands,
		Stream:           d.cfg.NATS.CommandStream,
		TenantSubjects:   d.cfg.NATS.TenantSubjects,
		RateLimit:        d.cfg.NATS.RateLimit,
		RateBurst:        d.cfg.NATS.RateBurst,
		// The Control socket's tenant binding and per-uid rate limit;
		// calls refused for their tenant go to the executor's audit log.
		ControlTenants:   d.cfg.Control.TenantsOf,
		ControlRateLimit: d.cfg.Control.RateLimit,
		ControlRateBurst: d.cfg.Control.RateBurst,
		Audit:            c.audit,
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
