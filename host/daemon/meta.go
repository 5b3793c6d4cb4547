package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/meta"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// metaState persists pins and leases (host/meta). Saving starts only once
// the stored snapshot was restored, which happens when the pools open (the
// pages they refer to come back from the disk tier then): a host waiting
// for its engine must not overwrite the snapshot with its empty index.
type metaState struct {
	store    *meta.Store
	restored atomic.Bool
	// dirty is poked after a directive applied (a pin, a lease, anything),
	// so the sweep loop saves soon instead of at its next tick: a SIGKILL
	// then loses at most metaSaveDelay of pins and leases, not a sweep
	// interval's.
	dirty chan struct{}
	// mover is the open pools' mover (nil while none are), which writes
	// pinned pages through to the disk tier before a pin's reply.
	mover atomic.Pointer[mover.Mover]
}

// metaSaveDelay gathers the directives of a burst into one save (each save
// is one bbolt transaction with an fsync).
const metaSaveDelay = 100 * time.Millisecond

// metaChanged asks for a save soon; it never blocks.
func (d *Daemon) metaChanged() {
	select {
	case d.meta.dirty <- struct{}{}:
	default:
	}
}

// savingAudit is the executor's audit log that also saves the metadata
// once a turn applied something: every pin, unpin and lease change goes
// through the executor, and is audited there, before the turn's reply. A
// turn that applied a pin or lease verb is made durable at once (durable
// returns when it is on disk), so its ok reply is a promise a SIGKILL
// cannot break; any other applied turn asks for a save soon (changed).
type savingAudit struct {
	executor.AuditLog
	changed func()
	durable func() error
}

// durableVerbs are the verbs whose effect a restart must keep: pins and
// leases (the audit record's verb: a directive's type or a cache_control
// action).
var durableVerbs = map[string]bool{
	string(directive.VerbCache): true, string(directive.VerbPin): true,
	string(directive.VerbPause): true, string(directive.VerbRenewLease): true, string(directive.VerbRevokeLease): true,
	string(directive.ActionPinBlocks): true, string(directive.ActionPinPrefix): true,
	string(directive.ActionUnpinBlocks): true, string(directive.ActionUnpinPrefix): true,
}

func (a savingAudit) Append(recs []executor.Record) error {
	err := a.AuditLog.Append(recs)
	applied, durable := false, false
	for _, r := range recs {
		if r.Status == directive.StatusOK {
			applied = true
			durable = durable || durableVerbs[r.Verb]
		}
	}
	switch {
	case durable:
		if derr := a.durable(); derr != nil {
			// The turn is applied and its reply goes out; it says so.
			err = errors.Join(err, fmt.Errorf("%w: %w", executor.ErrNotDurable, derr))
		}
	case applied:
		a.changed()
	}
	return err
}

// persistWait bounds how long a pin's reply waits for its pages to reach
// the disk tier; past it the pin is still saved, and its pages follow at
// the next mover step.
const persistWait = 5 * time.Second

// persistNow makes the pins and leases applied so far durable: the mover
// writes pinned pages through to the disk tier (a few steps at most, while
// some pinned page has no disk copy and the steps copy something), then
// the snapshot is saved in one fsynced transaction, whose failure it
// returns (and logs).
func (d *Daemon) persistNow() error {
	if m := d.meta.mover.Load(); m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), persistWait)
		for i := 0; i < 8 && d.pinnedOffDisk() && ctx.Err() == nil; i++ {
			r := m.Step(ctx)
			if len(r.Errors) > 0 {
				d.log.Warn("writing pinned pages to the disk tier before the pin's reply", "failed", r.Failed, "error", errors.Join(r.Errors...))
			}
			if r.Copied == 0 {
				break
			}
		}
		cancel()
	}
	return d.persistMeta()
}

// pinnedOffDisk reports whether a pinned page has no disk copy yet (with a
// disk tier configured).
func (d *Daemon) pinnedOffDisk() bool {
	if d.cfg.Tiers.Disk.CapacityPages <= 0 {
		return false
	}
	var st cache.Stats
	d.core.index.Do(func(ix *cache.Index) { st = ix.Stats() })
	return st.Tiers[tier.Disk].Pinned < st.PinnedPages
}

func (d *Daemon) buildMeta() error {
	if err := os.MkdirAll(d.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir %s: %w", d.cfg.DataDir, err)
	}
	s, err := meta.Open(filepath.Join(d.cfg.DataDir, "meta.db"))
	if err != nil {
		return err
	}
	d.meta.store = s
	d.meta.dirty = make(chan struct{}, 1)
	// Runs before the store closes (closers unwind last to first).
	d.closers = append(d.closers, s.Close, func() error { return d.saveMeta() })
	return nil
}

// restoreMeta re-applies the stored leases and pins to the pages the index
// holds now. What no longer fits (pages lost, a budget lowered) is logged and
// skipped; it runs once.
func (d *Daemon) restoreMeta() {
	if d.meta.store == nil || d.meta.restored.Load() {
		return
	}
	defer d.meta.restored.Store(true)
	snap, err := d.meta.store.Load()
	if err != nil {
		d.log.Warn("reading persisted pins and leases", "error", err)
	}
	c := &d.core
	var leases, pins, skipped int
	c.index.Do(func(ix *cache.Index) {
		leases, pins, skipped = d.restoreSnapshot(ix, snap)
	})
	if leases+pins+skipped > 0 {
		d.log.Info("restored persisted pins and leases", "leases", leases, "pins", pins, "skipped", skipped)
	}
}

// restoreSnapshot re-applies snap to ix, the index the caller holds, and
// counts what it restored and skipped.
func (d *Daemon) restoreSnapshot(ix *cache.Index, snap meta.Snapshot) (leases, pins, skipped int) {
	now, wall := d.core.clock.Now(), time.Now()
	for _, l := range snap.Leases {
		left := l.Expiry.Sub(wall)
		if left <= 0 {
			continue
		}
		if _, _, err := ix.Pause(cache.TargetHashes(l.Tenant, l.Seqs...), l.ID, l.Tier, left); err != nil {
			skipped++
			d.log.Warn("lease not restored", "lease", l.ID, "tenant", l.Tenant, "error", err)
			continue
		}
		leases++
	}
	for _, p := range snap.Pins {
		left := p.Expiry.Sub(wall)
		if left <= 0 {
			continue
		}
		if err := ix.RestorePin(cache.TargetHashes(p.Tenant, p.Seq), p.Count, p.TTL, now+left); err != nil {
			skipped++
			d.log.Warn("pin not restored", "tenant", p.Tenant, "block", p.Seq, "error", err)
			continue
		}
		pins++
	}
	return leases, pins, skipped
}

// savedMeta counts the saved pins and leases of tenant (or all) while they
// wait to be restored; ok is false once they were.
func (d *Daemon) savedMeta(tenant string, all bool) (pins, leases int, ok bool) {
	if d.meta.store == nil || d.meta.restored.Load() {
		return 0, 0, false
	}
	snap, err := d.meta.store.Load()
	if err != nil {
		d.log.Warn("reading persisted pins and leases", "error", err)
		return 0, 0, false
	}
	wall := time.Now()
	for _, p := range snap.Pins {
		if (all || p.Tenant == tenant) && p.Expiry.After(wall) {
			pins += p.Count
		}
	}
	for _, l := range snap.Leases {
		if (all || l.Tenant == tenant) && l.Expiry.After(wall) {
			leases++
		}
	}
	return pins, leases, true
}

// saveMeta writes the current pins and leases.
func (d *Daemon) saveMeta() error {
	if d.meta.store == nil || !d.meta.restored.Load() {
		return nil
	}
	var snap meta.Snapshot
	d.core.index.Do(func(ix *cache.Index) {
		now, wall := d.core.clock.Now(), time.Now()
		toWall := func(at time.Duration) time.Time { return wall.Add(at - now) }
		for _, p := range ix.Pins(now) {
			snap.Pins = append(snap.Pins, meta.Pin{Tenant: p.Tenant, Seq: p.Seq, Count: p.Count, TTL: p.TTL, Expiry: toWall(p.Expiry)})
		}
		for _, l := range ix.Leases() {
			snap.Leases = append(snap.Leases, meta.Lease{ID: l.ID, Tenant: l.Tenant, Tier: l.Tier, Seqs: l.Seqs, Expiry: toWall(l.Expiry)})
		}
	})
	if err := d.meta.store.Save(snap); err != nil {
		return fmt.Errorf("persist pins and leases: %w", err)
	}
	return nil
}
