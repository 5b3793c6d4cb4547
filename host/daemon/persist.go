package daemon

import (
	"context"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/tier"
)

// persistOnStop is the last thing a graceful stop does before the pools
// close: it writes the pages held only in memory (the device and host
// tiers, and in connector mode the staging tier) to the disk tier, most
// recent first and parents first, for at most pools.persist_on_stop, so
// that the next start restores them from disk and a rolling restart keeps
// the cache warm. What the time allows is written; the rest is lost as
// before. A SIGKILL meanwhile loses only the pages not yet written: a page
// is findable on disk once its write returned, and a page whose parent is
// not there is never restored.
//
// It runs after the engine service, the control plane and the step loop
// stopped (Run's goroutines ended), so nothing else moves pages meanwhile.
func (d *Daemon) persistOnStop() {
	budget := d.cfg.Pools.PersistOnStop
	if budget <= 0 || d.cfg.Tiers.Disk.CapacityPages == 0 {
		return
	}
	a := &d.attached
	a.mu.Lock()
	p := a.pools
	a.mu.Unlock()
	if p == nil || p.Mover == nil || p.Set == nil || p.Set.Disk == nil {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	var (
		ts      []cache.Transition
		planned cache.PersistResult
	)
	d.core.index.Do(func(ix *cache.Index) { ts, planned = ix.PlanPersist(tier.Disk, nil) })
	if len(ts) == 0 {
		return
	}
	r := p.Mover.Run(ctx, ts)
	syncErr := p.Set.Disk.Sync()
	log := d.log.With("written", r.Copied, "planned", planned.Planned, "no_room_or_busy", planned.Left,
		"not_written", len(ts)-r.Copied, "bytes", r.Bytes, "took", time.Since(start).Round(time.Millisecond), "limit", budget)
	switch {
	case syncErr != nil:
		log.Error("pages written to the disk tier for the restart, but the sync failed", "error", syncErr)
	case r.Copied < len(ts):
		log.Warn("pages written to the disk tier for the restart; not all within pools.persist_on_stop", "failed", r.Failed, "errors", r.Errors)
	default:
		log.Info("pages written to the disk tier for the restart")
	}
}
