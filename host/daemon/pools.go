package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/remote"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/host/preflight"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// buildPools opens the four tiers' pools and the mover when the
// configuration names a model. The disk tier's pages are put back into the
// index, so paused sessions and written-back pages survive a restart.
func (d *Daemon) buildPools() error {
	l, ok, err := d.cfg.Layout()
	if err != nil {
		return err
	}
	if !ok {
		d.log.Info("no model configured: pools open when an engine registers its layout")
		d.AddCheck("pools", func() error { return nil })
		return nil
	}
	c := &d.core
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.pools, c.mover, err = d.openPools(ctx, &l, false)
	if err != nil {
		return err
	}
	d.closers = append(d.closers, c.pools.Close)
	d.log.Info("pools open", "model", l.Model, "page_bytes", l.PageBytes(), "fingerprint", l.Fingerprint())
	d.AddCheck("pools", func() error { return nil })
	return nil
}

// openPools opens the four tiers' pools for layout l and starts a mover on
// them; the disk tier's pages are put back into the index. The caller owns
// the returned pools (Close). The engine service opens pools this way when
// an engine registers a layout and the config names no model. staging opens
// the device tier in shared memory whatever the backend says: a
// connector-mode engine copies its pages through it (host/engine/mode.go).
func (d *Daemon) openPools(ctx context.Context, l *layout.Layout, staging bool) (set *tiers.Set, m *mover.Mover, err error) {
	c := &d.core
	// What a failed open allocated (a pool's bookkeeping is Go heap) goes
	// back to the system now, not minutes later.
	defer func() {
		if err != nil {
			debug.FreeOSMemory()
		}
	}()
	// The layout is known now: sizes that do not fit this machine, or a
	// directory gone since the start, are refused before anything is
	// allocated, as the operator's to fix (misconfigured, not transient).
	if err := errors.Join(preflight.Dirs(d.cfg, true), preflight.Sizes(d.cfg, l, preflight.DeviceInRAM(d.cfg, staging))); err != nil {
		return nil, nil, errcode.New(errcode.Misconfigured, "%s", preflight.Detail(err))
	}
	backend, _ := tiers.ParseBackend(d.cfg.Pools.DeviceBackend) // validated with the config
	if staging {
		backend = tiers.BackendMemfd
	}
	fsync, _ := disk.ParseFsyncPolicy(d.cfg.Pools.DiskFsync)
	o := tiers.Options{
		Layout:           l,
		DevicePages:      d.cfg.Tiers.Device.CapacityPages,
		DeviceBackend:    backend,
		DeviceOrdinal:    d.cfg.Pools.DeviceOrdinal,
		HostPages:        d.cfg.Tiers.Host.CapacityPages,
		DiskDir:          d.cfg.DiskDir(),
		DiskPages:        d.cfg.Tiers.Disk.CapacityPages,
		DiskFsync:        fsync,
		DiskVerifyOnOpen: d.cfg.Pools.DiskVerifyOnOpen,
		RemoteBucket:     d.cfg.Pools.RemoteBucket,
		RemoteMaxBytes:   d.cfg.Pools.RemoteMaxBytes,
		RemoteReplicas:   d.cfg.Pools.RemoteReplicas,
		Logger:           d.log.Named("pools"),
	}
	if d.cfg.Tiers.Remote.CapacityPages > 0 {
		if err := d.remoteBackend(&o); err != nil {
			return nil, nil, fmt.Errorf("remote tier: %w", err)
		}
	}
	set, err = tiers.Open(ctx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("open pools for %s: %w", l.Model, err)
	}
	m, err = mover.New(mover.Options{
		Index:        c.index,
		Pools:        set,
		Workers:      d.cfg.Mover.Workers,
		Retries:      d.cfg.Mover.Retries,
		RetryBackoff: d.cfg.Mover.RetryBackoff,
		DropWait:     d.cfg.Mover.DropWait,
		OnFailure: func(from, to tier.Tier) {
			d.metrics.CountTransferFailure(from.String(), to.String())
		},
		OnCopy: func(from, to tier.Tier, bytes int64, took time.Duration) {
			d.metrics.ObserveCopy(from.String(), to.String(), bytes, took)
		},
		Logger: d.log.Named("mover"),
	})
	if err != nil {
		_ = set.Close()
		return nil, nil, fmt.Errorf("start mover: %w", err)
	}
	if d.cfg.Tiers.Disk.CapacityPages > 0 {
		res, err := m.Restore(ctx, tier.Disk)
		if err != nil {
			_ = set.Close()
			return nil, nil, fmt.Errorf("restore the disk tier from %s: %w", d.cfg.DiskDir(), err)
		}
		d.log.Info("disk tier restored into the index", "result", fmt.Sprintf("%+v", res))
	}
	d.restoreMeta()
	return set, m, nil
}

// stepLoop runs the eviction planner and write-through copies every
// mover.step_interval.
func (d *Daemon) stepLoop(ctx context.Context, wg *sync.WaitGroup) {
	m := d.core.mover
	if m == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d.cfg.Mover.StepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if r := m.Step(ctx); len(r.Errors) > 0 && ctx.Err() == nil {
				d.log.Warn("tier step had failures", "failed", r.Failed, "errors", errors.Join(r.Errors...))
			}
		}
	}()
}

// remoteBackend sets where the remote tier keeps pages: a JetStream bucket
// on the host's NATS connection, or Redis/Valkey (pools.remote_backend).
func (d *Daemon) remoteBackend(o *tiers.Options) error {
	p := d.cfg.Pools
	if p.RemoteBackend != "redis" {
		js, err := d.core.nats.JetStream()
		if err != nil {
			return err
		}
		o.RemoteJS = js
		return nil
	}
	ro := remote.RedisOptions{Addrs: p.RemoteRedis.Addrs, Cluster: p.RemoteRedis.Cluster,
		Username: p.RemoteRedis.Username, Bucket: p.RemoteBucket, Logger: d.log.Named("redis")}
	if f := p.RemoteRedis.PasswordFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("pools.remote_redis.password_file: %w", err)
		}
		ro.Password = strings.TrimSpace(string(b))
	}
	be, err := remote.NewRedis(ro)
	if err != nil {
		return err
	}
	o.RemoteBackend = be
	return nil
}
