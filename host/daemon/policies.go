package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/plugins"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// buildPolicies starts the policy runtime with the configured set. The
// runtime exists even with no policies, so that editing the config file
// can add some later.
func (d *Daemon) buildPolicies() error {
	rt, err := plugins.New(plugins.Options{
		Executable:  d.policyExe,
		Sink:        plugins.SinkFunc(d.applyPolicyTurn),
		Logger:      d.log.Named("policies"),
		Metrics:     d.metrics,
		CallTimeout: d.cfg.PolicyRuntime.CallTimeout,
		QueueSize:   d.cfg.PolicyRuntime.QueueSize,
	})
	if err != nil {
		return fmt.Errorf("policy runtime: %w", err)
	}
	d.policies = rt
	d.closers = append(d.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rt.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rt.Swap(ctx, d.cfg.Policies); err != nil {
		return fmt.Errorf("start policies: %w", err)
	}
	if len(d.cfg.Policies) > 0 {
		d.log.Info("policies running", "count", len(d.cfg.Policies))
	}
	return nil
}

// applyPolicyTurn is the policies' door: the plugin runtime names the
// policy as the turn's source, and the ingress tokenizes, applies, audits
// and counts the turn as it does every door's.
func (d *Daemon) applyPolicyTurn(ctx context.Context, t directive.Turn) error {
	reply := d.core.in.Apply(ctx, t)
	if reply.Status != directive.StatusOK {
		if reply.Error != nil {
			return reply.Error
		}
		return fmt.Errorf("turn refused: %+v", reply.Results)
	}
	return nil
}

// runPolicies sends ticks and tier pressure, and watches the config file.
func (d *Daemon) runPolicies(ctx context.Context, wg *sync.WaitGroup) {
	if d.configPath != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.policies.WatchConfig(ctx, d.configPath, d.environ); err != nil && ctx.Err() == nil {
				d.log.Error("config file watch stopped: policy changes need a restart", "path", d.configPath, "error", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := d.cfg.PolicyRuntime.TickInterval
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				d.tick(now, every)
			}
		}
	}()
}

// tick offers a Tick, and pressure for every tier above its high watermark.
func (d *Daemon) tick(now time.Time, every time.Duration) {
	d.observe(policy.Observation{Time: now, Kind: policy.KindTick, Tick: &policy.Tick{Interval: every}})
	var st cache.Stats
	d.core.index.Do(func(ix *cache.Index) { st = ix.Stats() })
	for _, ts := range st.Tiers {
		high := d.tierConfig(ts.Tier).HighWatermark
		if ts.Capacity == 0 || float64(ts.Pages) <= high*float64(ts.Capacity) {
			continue
		}
		d.observe(policy.Observation{Time: now, Kind: policy.KindTierPressure, Pressure: &policy.TierPressure{
			Tier: ts.Tier.String(), UsedPages: int64(ts.Pages), CapacityPages: int64(ts.Capacity), HighWatermark: high,
		}})
	}
}

// observe offers obs to the policies; the runtime never blocks, and counts
// what it cannot queue.
func (d *Daemon) observe(obs policy.Observation) {
	if err := d.policies.Observe(obs); err != nil {
		d.log.Debug("observation not offered to policies", "kind", obs.Kind, "error", err)
	}
}

// Observe offers an observation to the running policies. The engine
// service reports requests through it.
func (d *Daemon) Observe(obs policy.Observation) { d.observe(obs) }

func (d *Daemon) tierConfig(t tier.Tier) config.Tier {
	switch t {
	case tier.Device:
		return d.cfg.Tiers.Device
	case tier.Host:
		return d.cfg.Tiers.Host
	case tier.Disk:
		return d.cfg.Tiers.Disk
	}
	return d.cfg.Tiers.Remote
}
