package daemon

import (
	"context"
	"errors"
	"sync"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/tier"
)

// attachments are what the executor is bound to once pools exist: the
// mover (Warm's copies, freed slots) and the splicer of the registered
// layout. Pools open at start (a configured model) or when the first engine
// registers; the splicer needs the registration's RoPE config, so it is
// built at every registration and rebuilt when the layout changes.
type attachments struct {
	mu      sync.Mutex
	pools   *engine.Pools
	splicer *splice.Splicer
	// closeKernels releases the splicer's kernels (the CUDA module).
	closeKernels func() error
}

// attachPools binds the executor to the mover of p, without a splicer:
// what a host with a configured model has before an engine registers.
func (d *Daemon) attachPools(p *engine.Pools) error {
	a := &d.attached
	a.mu.Lock()
	defer a.mu.Unlock()
	return d.attachLocked(p, nil, nil)
}

// onRegister runs at every engine registration (engine.Config.OnRegister):
// it builds the splicer for the registered layout over the device pool and
// attaches it with the mover's hooks. A layout the kernels cannot rotate
// (fp8) still gets a splicer without a device, so span Pin and Retain
// resolve sessions while Splice answers unavailable.
func (d *Daemon) onRegister(reg engine.Registration, p *engine.Pools) {
	if p == nil {
		return
	}
	svc := d.engine.svc
	if pub := d.eventPublisher(); pub != nil {
		// A connector-mode engine announces its own device blocks; the
		// staging tier behind it is kvpilot's business only.
		pub.Silence(tier.Device, reg.Mode == engine.ModeConnector)
	}
	dev, closeKernels, err := splice.DeviceForPools(p.Set, reg.RopeConfig)
	if err != nil {
		d.log.Warn("splice is unavailable for this layout: span verbs that edit the cache are refused", "layout", reg.Layout.String(), "error", err)
		dev, closeKernels = nil, func() error { return nil }
	}
	// A connector-mode engine (vLLM's KV connector) serves no fill orders:
	// its splices end before their first replacement row, or build on the
	// pages a prefill request of the front door cached (host/gateway).
	fill := svc.SpliceFill
	if reg.Mode == engine.ModeConnector {
		fill = nil
	}
	can := d.recomputesOf(reg.Mode, reg.Recompute)
	d.logDefaults(reg, can)
	sp, err := splice.New(splice.Config{
		Index:      d.core.index,
		Device:     dev,
		Sessions:   svc.SpliceSessions(),
		Salt:       d.core.index.Salt,
		SinkTokens: d.cfg.Index.SinkTokens,
		Fill:       fill,
		Free:       d.freeHook(p.Mover),
		OnFillError: func(session string, err error) {
			d.log.Warn("splice fill failed; the session re-prefills from its first replacement", "session", session, "error", err)
		},
		Recompute:   reg.Recompute,
		Rule:        spliceRule(d.cfg.Splice, can),
		OnRecompute: d.onRecompute,
	})
	if err != nil {
		_ = closeKernels()
		d.log.Error("building the splicer failed", "error", err)
		return
	}
	a := &d.attached
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := d.attachLocked(p, sp, closeKernels); err != nil {
		d.log.Error("attaching the splicer failed", "error", err)
		return
	}
	svc.SetSplicer(sp)
	d.log.Info("splicer ready", "layout", reg.Layout.String(), "device", dev != nil, "sink_tokens", d.cfg.Index.SinkTokens, "auto_splice", d.cfg.Index.AutoSplice)
}

// attachLocked replaces the executor's attachments and releases the
// previous splicer's kernels. It never waits for the previous splicer's
// background fills: the engine service may call in holding its mutex, which
// a finishing fill takes; fills need no kernels (the engine writes them),
// and a retired registration's fills have already failed.
func (d *Daemon) attachLocked(p *engine.Pools, sp *splice.Splicer, closeKernels func() error) error {
	a := &d.attached
	err := d.core.exec.Attach(executor.Attachments{
		Transitions: d.transitionsHook(p.Mover),
		Free:        d.freeHook(p.Mover),
		Splicer:     sp,
		Import:      d.importHook(p.Mover),
	})
	if err != nil {
		if closeKernels != nil {
			_ = closeKernels()
		}
		return err
	}
	oldClose := a.closeKernels
	a.pools, a.splicer, a.closeKernels = p, sp, closeKernels
	d.meta.mover.Store(p.Mover)
	d.releaseKernels(oldClose)
	return nil
}

// releaseKernels closes a splicer's kernels under the index lock, so a turn
// that is applying a splice with them finishes first (kernels run only
// under that lock).
func (d *Daemon) releaseKernels(closeKernels func() error) {
	if closeKernels == nil {
		return
	}
	var err error
	d.core.index.Do(func(*cache.Index) { err = closeKernels() })
	if err != nil {
		d.log.Warn("releasing the splice kernels", "error", err)
	}
}

// detachPools unbinds the executor from pools the engine service is about
// to close (a layout change): Warm and the span verbs are refused until
// the next registration attaches new ones.
func (d *Daemon) detachPools(p *engine.Pools) {
	a := &d.attached
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pools == nil || a.pools.Set != p.Set {
		return
	}
	if err := d.core.exec.Attach(executor.Attachments{}); err != nil {
		d.log.Error("detaching the executor from closing pools", "error", err)
	}
	// No waiting for background fills here: the service calls in holding
	// its mutex (see attachLocked).
	d.releaseKernels(a.closeKernels)
	a.pools, a.splicer, a.closeKernels = nil, nil, nil
	d.meta.mover.Store(nil)
}

// closeAttachments waits for background fills and releases the kernels
// (host shutdown).
func (d *Daemon) closeAttachments() error {
	a := &d.attached
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.splicer != nil {
		a.splicer.Wait() // the service has closed: its fills have failed
	}
	d.releaseKernels(a.closeKernels)
	a.closeKernels = nil
	return nil
}

// transitionsHook hands the executor's planned copies (Warm) to the mover
// m, in the background under the host's lifetime.
func (d *Daemon) transitionsHook(m *mover.Mover) func([]cache.Transition) {
	if m == nil {
		return nil
	}
	return func(ts []cache.Transition) {
		fence := m.Submit(d.life, ts)
		go func() {
			r, err := fence.Wait(d.life)
			if err == nil && len(r.Errors) > 0 {
				d.log.Warn("warm transfers failed", "failed", r.Failed, "errors", errors.Join(r.Errors...))
			}
		}()
	}
}

// freeHook releases the pool copies of pages the index removed on its own
// authority (prune, purge, revoke, splice).
func (d *Daemon) freeHook(m *mover.Mover) func([]cache.Freed) {
	if m == nil {
		return nil
	}
	return func(freed []cache.Freed) {
		if err := m.Release(d.life, freed); err != nil {
			d.log.Warn("releasing freed pages failed", "pages", len(freed), "error", err)
		}
	}
}

// importHook indexes remote-tier pages another host paused, for a Warm that
// names them; nil without a remote tier.
func (d *Daemon) importHook(m *mover.Mover) func(context.Context, string, []uint64) {
	if m == nil || d.cfg.Tiers.Remote.CapacityPages <= 0 {
		return nil
	}
	return func(ctx context.Context, tenant string, seqs []uint64) {
		res, err := m.Import(ctx, tier.Remote, tenant, seqs)
		if err != nil {
			d.log.Warn("importing shared pages for a Warm failed", "tenant", tenant, "pages", len(seqs), "error", err)
			return
		}
		if res.Inserted > 0 {
			d.log.Debug("imported shared pages for a Warm", "tenant", tenant, "inserted", res.Inserted, "orphans", res.Orphans)
		}
	}
}
