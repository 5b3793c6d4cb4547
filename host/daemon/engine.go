package daemon

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/uds"
)

// engineHost is the Engine service with its two listeners.
type engineHost struct {
	svc     *engine.Service
	ln      *uds.Listener // the gRPC engine socket
	fdln    *uds.Listener // the descriptor side channel
	started atomic.Bool
}

func (d *Daemon) engineHost() *engineHost { return d.engine }

// buildEngine binds the engine socket and its descriptor side channel and
// builds the Engine service (DESIGN.md §7). With a configured model the
// service serves the pools opened at start; without one it opens pools when
// the first engine registers its layout.
func (d *Daemon) buildEngine() error {
	c := &d.core
	cfg := engine.Config{
		Index:            c.index,
		Lock:             &c.mu,
		Executor:         c.exec,
		FDSocket:         d.cfg.EngineFDSocket(),
		WorkerID:         strconv.FormatUint(d.cfg.WorkerID, 10),
		LoadBackDeadline: d.cfg.Engine.LoadBackDeadline,
		RequestTTL:       d.cfg.Engine.RequestTTL,
		MaxSessions:      d.cfg.Engine.MaxSessions,
		Log:              d.log.Named("engine"),
	}
	if c.pools != nil {
		l, _, err := d.cfg.Layout()
		if err != nil {
			return err
		}
		cfg.Pools = &engine.Pools{Layout: &l, Set: c.pools, Mover: c.mover, DeviceOrdinal: d.cfg.Pools.DeviceOrdinal}
	} else {
		cfg.OpenPools = func(ctx context.Context, l *layout.Layout) (*engine.Pools, error) {
			set, m, err := d.openPools(ctx, l)
			if err != nil {
				return nil, err
			}
			d.log.Info("pools open for the registered layout", "model", l.Model, "page_bytes", l.PageBytes(), "fingerprint", l.Fingerprint())
			return &engine.Pools{Layout: l.Clone(), Set: set, Mover: m, DeviceOrdinal: d.cfg.Pools.DeviceOrdinal, Close: set.Close}, nil
		}
	}
	svc, err := engine.New(cfg)
	if err != nil {
		return err
	}
	listen := func(key, path string) (*uds.Listener, error) {
		ln, err := uds.Listen(uds.Options{Path: path, Group: d.cfg.Engine.Group, AllowUIDs: d.cfg.Engine.AllowUIDs, Log: d.log.Named("engine")})
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", key, path, err)
		}
		return ln, nil
	}
	eh := &engineHost{svc: svc}
	if eh.ln, err = listen("engine.socket", d.cfg.EngineSocket()); err != nil {
		return err
	}
	d.closers = append(d.closers, func() error { _ = eh.ln.Close(); return nil })
	if eh.fdln, err = listen("engine.socket (descriptor side channel)", d.cfg.EngineFDSocket()); err != nil {
		return err
	}
	d.closers = append(d.closers, func() error { _ = eh.fdln.Close(); return nil })
	// Runs before the closers above (they are unwound last to first), so
	// requests are released and pools closed while the index still stands.
	d.closers = append(d.closers, svc.Close)
	d.engine = eh
	d.AddCheck("engine", func() error { return nil })
	return nil
}

// runEngine serves the Engine service until ctx ends, then stops it within
// a grace period. wg tracks its goroutines.
func (d *Daemon) runEngine(ctx context.Context, wg *sync.WaitGroup) {
	eh := d.engineHost()
	if eh == nil || !eh.started.CompareAndSwap(false, true) {
		return
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := eh.svc.Serve(eh.ln); err != nil {
			d.log.Error("engine socket stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := eh.svc.ServeFDs(eh.fdln); err != nil {
			d.log.Error("engine descriptor socket stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		eh.svc.Run(ctx, d.cfg.Mover.StepInterval)
		eh.svc.Stop(5 * time.Second)
	}()
	d.log.Info("serving the engine protocol", "socket", eh.ln.Path(), "fd_socket", eh.fdln.Path())
}
