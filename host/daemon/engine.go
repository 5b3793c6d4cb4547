package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/engine/grpcserver"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// engineHost is the Engine service, its protocol's server and its two
// listeners.
type engineHost struct {
	svc     *engine.Service
	srv     *grpcserver.Server
	ln      *uds.Listener // the gRPC engine socket
	fdln    *uds.Listener // the descriptor side channel
	started atomic.Bool
}

func (d *Daemon) engineHost() *engineHost { return d.engine }

// buildEngine binds the engine socket and its descriptor side channel and
// builds the Engine service. With a configured model the
// service serves the pools opened at start; without one it opens pools when
// the first engine registers its layout.
func (d *Daemon) buildEngine() error {
	c := &d.core
	cfg := engine.Config{
		Index:            c.index,
		Ingress:          c.in,
		LoadBackDeadline: d.cfg.Engine.LoadBackDeadline,
		RequestTTL:       d.cfg.Engine.RequestTTL,
		MaxSessions:      d.cfg.Engine.MaxSessions,
		Log:              d.log.Named("engine"),
		Metrics:          d.metrics,
		Observer:         policyObserver{d},
		OnRegister:       d.onRegister,
		OnPoolsClose:     d.detachPools,
		AutoSplice:       d.cfg.Index.AutoSplice,
		CheckRecompute:   d.checkRecompute,
	}
	if c.pools != nil {
		l, _, err := d.cfg.Layout()
		if err != nil {
			return err
		}
		cfg.Pools = &engine.Pools{Layout: &l, Set: c.pools, Mover: c.mover, DeviceOrdinal: d.cfg.Pools.DeviceOrdinal}
	} else {
		cfg.OpenPools = func(ctx context.Context, l *layout.Layout, mode engine.Mode) (*engine.Pools, error) {
			set, m, err := d.openPools(ctx, l, mode == engine.ModeConnector)
			if err != nil {
				return nil, err
			}
			d.log.Info("pools open for the registered layout", "model", l.Model, "mode", mode, "page_bytes", l.PageBytes(), "fingerprint", l.Fingerprint())
			p := &engine.Pools{Layout: l.Clone(), Set: set, Mover: m, DeviceOrdinal: d.cfg.Pools.DeviceOrdinal, Close: set.Close}
			// Warm works from here on; the splicer follows at OnRegister.
			if err := d.attachPools(p); err != nil {
				_ = set.Close()
				return nil, err
			}
			return p, nil
		}
	}
	svc, err := engine.New(cfg)
	if err != nil {
		return err
	}
	srv, err := grpcserver.New(grpcserver.Config{Engine: svc, FDSocket: absPath(d.cfg.EngineFDSocket()),
		WorkerID: strconv.FormatUint(d.cfg.WorkerID, 10), Metrics: d.metrics, Log: d.log.Named("engine")})
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
	eh := &engineHost{svc: svc, srv: srv}
	if eh.ln, err = listen("engine.socket", d.cfg.EngineSocket()); err != nil {
		return err
	}
	d.closers = append(d.closers, func() error { _ = eh.ln.Close(); return nil })
	if eh.fdln, err = listen("engine.socket (descriptor side channel)", d.cfg.EngineFDSocket()); err != nil {
		return err
	}
	d.closers = append(d.closers, func() error { _ = eh.fdln.Close(); return nil })
	// Runs after the engine service closed (closers unwind last to first):
	// background splice fills have failed by then, and end.
	d.closers = append(d.closers, d.closeAttachments)
	// Runs before the closers above (they are unwound last to first), so
	// requests are released and pools closed while the index still stands.
	d.closers = append(d.closers, svc.Close)
	d.engine = eh
	d.AddCheck("engine", func() error {
		if _, ok := svc.Registration(); !ok {
			return waiting("not registered: no engine has registered on " + d.cfg.EngineSocket() + " yet")
		}
		return nil
	})
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
		if err := eh.srv.Serve(eh.ln); err != nil {
			d.log.Error("engine socket stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := eh.srv.ServeFDs(eh.fdln); err != nil {
			d.log.Error("engine descriptor socket stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		eh.svc.Run(ctx, d.cfg.Mover.StepInterval)
		eh.srv.Stop(5 * time.Second)
	}()
	d.log.Info("serving the engine protocol", "socket", eh.ln.Path(), "fd_socket", eh.fdln.Path())
}

// BytesPerPage is the page size in bytes of the layout the pools hold, or 0
// before any are open (the control plane's Stats).
func (d *Daemon) BytesPerPage() int64 {
	if eh := d.engineHost(); eh != nil {
		if p := eh.svc.Pools(); p != nil && p.Layout != nil {
			return int64(p.Layout.PageBytes())
		}
	}
	return 0
}

// sessionCount is how many sessions the engine service remembers, of
// tenant or of all tenants (the control plane's Stats).
func (d *Daemon) sessionCount(tenant string, all bool) int {
	if eh := d.engineHost(); eh != nil {
		return eh.svc.SessionCount(tenant, all)
	}
	return 0
}

// Engine returns the Engine service.
func (d *Daemon) Engine() *engine.Service {
	if eh := d.engineHost(); eh != nil {
		return eh.svc
	}
	return nil
}

// policyObserver reports the engine's requests to the policies as
// RequestStarted and RequestFinished observations. The engine calls it
// outside every lock; offering to the runtime never blocks.
type policyObserver struct{ d *Daemon }

func (o policyObserver) RequestStarted(r engine.RequestStarted) {
	o.d.observe(policy.Observation{Time: time.Now(), Kind: policy.KindRequestStarted, Session: r.Session, Tenant: r.Tenant,
		Started: &policy.RequestStarted{RequestID: r.RequestID, Turn: int64(r.Turn), PromptTokens: int64(len(r.Tokens)),
			PageSize: uint32(r.PageSize), BlockHashes: r.BlockHashes, Messages: r.Messages}})
}

func (o policyObserver) RequestFinished(r engine.RequestFinished) {
	o.d.observe(policy.Observation{Time: time.Now(), Kind: policy.KindRequestFinished, Session: r.Session, Tenant: r.Tenant,
		Finished: &policy.RequestFinished{RequestID: r.RequestID,
			Usage:           policy.Usage{InputTokens: r.InputTokens, CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens, ReasoningTokens: r.ReasoningTokens},
			CacheControl:    policy.CacheControl{Type: r.CacheControl.Type, TTL: r.CacheControl.TTL},
			BlockHashes:     r.BlockHashes,
			ReasoningBlocks: r.ReasoningBlocks}})
}

// absPath makes a path absolute. The descriptor socket's path is told to
// engines, which may run from any directory: a path relative to the host's
// working directory would send them to a socket that is not there.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
