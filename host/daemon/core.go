package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/events"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// core is the part of the host every front end shares: the cache index and
// the one lock that serializes it, the directive executor, the event queue
// and the NATS connection.
type core struct {
	clock cache.Clock
	index *guarded.Index
	exec  *executor.Executor
	// in is the one way in for directives, over exec: every door
	// (socket, NATS, policies, engine pins, front door) goes through it.
	in     *ingress.Ingress
	audit  *executor.FileAudit
	events *events.Queue
	nats   *natsembed.NATS

	// pools and mover are nil until a layout is known (config model, or
	// later an engine's registration).
	pools *tiers.Set
	mover *mover.Mover
}

// buildCore opens the index, the audit log and NATS.
func (d *Daemon) buildCore() error {
	c := &d.core
	if err := os.MkdirAll(d.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir %s: %w", d.cfg.DataDir, err)
	}
	wp, err := cache.ParseWritePolicy(d.cfg.Index.WritePolicy)
	if err != nil {
		return fmt.Errorf("index.write_policy: %w", err)
	}
	c.clock = cache.NewMonotonicClock()
	c.events = events.NewQueue()
	ix, err := cache.New(cache.Config{
		PageSize:       d.cfg.Index.PageSize,
		Tiers:          tierConfigs(d.cfg),
		DeviceWrite:    wp,
		TenantPinQuota: d.cfg.Pins.TenantQuotaPages,
		Namespace:      d.cfg.Index.NamespaceFunc(),
		Clock:          c.clock,
		OnEvent:        c.events.Push,
	})
	if err != nil {
		return fmt.Errorf("open cache index: %w", err)
	}
	c.index = guarded.New(ix)
	c.audit, err = executor.OpenFileAudit(filepath.Join(d.cfg.DataDir, "audit.log"), false)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	d.closers = append(d.closers, c.audit.Close)
	c.nats, err = natsembed.Start(natsembed.Options{
		URL:          d.cfg.NATS.URL,
		CredsFile:    d.cfg.NATS.CredsFile,
		NKeySeedFile: d.cfg.NATS.NKeySeedFile,
		TLSCAFile:    d.cfg.NATS.TLSCAFile,
		TLSCertFile:  d.cfg.NATS.TLSCertFile,
		TLSKeyFile:   d.cfg.NATS.TLSKeyFile,
		DataDir:      filepath.Join(d.cfg.DataDir, "nats"),
		Listen:       d.cfg.NATS.Listen,
		Users:        natsUsers(d.cfg),
		Logger:       d.log.Named("nats"),
	})
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	d.closers = append(d.closers, c.nats.Close)
	d.AddCheck("nats", func() error {
		if !c.nats.Conn().IsConnected() {
			return fmt.Errorf("nats connection is %v", c.nats.Conn().Status())
		}
		return nil
	})
	if err := d.buildPools(); err != nil {
		return err
	}
	pauseTier, err := tier.Parse(d.cfg.Index.PauseTier)
	if err != nil {
		return fmt.Errorf("index.pause_tier: %w", err)
	}
	c.exec, err = executor.New(executor.Config{
		Index:        c.index,
		PinTTL:       d.cfg.TTLPolicy(),
		PauseTier:    pauseTier,
		WorkerID:     directive.WorkerID(strconv.FormatUint(d.cfg.WorkerID, 10)),
		Audit:        savingAudit{AuditLog: c.audit, changed: d.metaChanged, durable: d.persistNow},
		OnAuditError: func(err error) { d.log.Error("audit log write failed", "error", err) },
		Limits:       directive.Limits{SinkTokens: int64(d.cfg.Index.SinkTokens)},
		// Transitions, Free and the splicer are attached when pools open
		// (below, or when an engine registers): until then Warm and the
		// span verbs are refused as unavailable.
	})
	if err != nil {
		return fmt.Errorf("start executor: %w", err)
	}
	c.in, err = ingress.New(ingress.Config{
		Executor: c.exec,
		// Calls refused at a door go to the same audit log as the rest.
		Audit:    c.audit,
		Metrics:  d.metrics,
		Tokenize: d.tokenize,
		RateLimits: map[ingress.Door]ingress.RateLimit{
			ingress.Socket: {PerSecond: d.cfg.Control.RateLimit, Burst: d.cfg.Control.RateBurst, Key: "control.rate_limit"},
			ingress.NATS:   {PerSecond: d.cfg.NATS.RateLimit, Burst: d.cfg.NATS.RateBurst, Key: "nats.rate_limit"},
		},
		Log: d.log.Named("ingress"),
	})
	if err != nil {
		return fmt.Errorf("start the directive ingress: %w", err)
	}
	if c.mover != nil {
		if err := d.attachPools(&engine.Pools{Set: c.pools, Mover: c.mover}); err != nil {
			return fmt.Errorf("attach the pools to the executor: %w", err)
		}
	}
	d.metrics.Registry.MustRegister(&indexCollector{c: c, pageBytes: d.BytesPerPage})
	return nil
}

func tierConfigs(cfg config.Config) [tier.Count]cache.TierConfig {
	var out [tier.Count]cache.TierConfig
	for i, t := range [tier.Count]config.Tier{cfg.Tiers.Device, cfg.Tiers.Host, cfg.Tiers.Disk, cfg.Tiers.Remote} {
		out[i] = cache.TierConfig{Capacity: t.CapacityPages, High: t.HighWatermark, Low: t.LowWatermark, PinFraction: t.PinBudget}
	}
	return out
}

// sweep expires pins, retentions and leases every interval (expiry is also
// applied lazily at every eviction scan), and persists pins and leases
// after each sweep and soon after a directive changed something.
func (d *Daemon) sweep(ctx context.Context) {
	t := time.NewTicker(d.cfg.Index.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.meta.dirty:
			select { // gather the rest of a burst into one save
			case <-ctx.Done():
				return
			case <-time.After(metaSaveDelay):
			}
			select {
			case <-d.meta.dirty:
			default:
			}
			d.persistMeta()
			continue
		case <-t.C:
		}
		c := &d.core
		var res cache.SweepResult
		c.index.Do(func(ix *cache.Index) { res = ix.Sweep(c.clock.Now()) })
		if res.Pins > 0 || res.Leases > 0 {
			d.log.Debug("swept expired entries", "pins", res.Pins, "leases", res.Leases, "expired_leases", res.Expired)
		}
		d.persistMeta()
	}
}

// persistMeta saves pins and leases, logging a failure (the next save
// retries).
func (d *Daemon) persistMeta() error {
	err := d.saveMeta()
	if err != nil {
		d.log.Error("saving pins and leases failed; a restart now would lose recent ones", "error", err)
	}
	return err
}
