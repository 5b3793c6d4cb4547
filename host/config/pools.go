package config

import (
	"fmt"
	"net"
	"path/filepath"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
)

// Layout returns the configured model's layout, or ok false when no model is
// configured (the pools then wait for an engine to register one).
func (c Config) Layout() (l layout.Layout, ok bool, err error) {
	m := c.Model
	if m.Name == "" {
		return layout.Layout{}, false, nil
	}
	dt, err := layout.ParseDType(m.DType)
	if err != nil {
		return l, true, fmt.Errorf("%w: model.dtype: %w", ErrInvalid, err)
	}
	// An empty rope_style is the attention's usual pairing: half_split for
	// mha (Llama, Qwen), interleaved for mla (DeepSeek-V2's cache).
	styleName := m.RopeStyle
	if styleName == "" {
		styleName = map[string]string{"mha": "half_split", "mla": "interleaved"}[m.Attention]
	}
	style, err := layout.ParseRopeStyle(styleName)
	if err != nil && (m.Attention == "mha" || m.Attention == "mla") {
		return l, true, fmt.Errorf("%w: model.rope_style: %w", ErrInvalid, err)
	}
	switch m.Attention {
	case "mha":
		l = layout.MHA(m.Name, c.Index.PageSize, dt, m.Layers, m.KVHeads, m.HeadDim, m.RopeDim, style)
	case "mla":
		l = layout.MLA(m.Name, c.Index.PageSize, dt, m.Layers, m.KVLoraRank, m.RopeDim, style)
	default:
		return l, true, fmt.Errorf("%w: model.attention: %q is not mha or mla", ErrInvalid, m.Attention)
	}
	if err := l.Validate(); err != nil {
		return l, true, fmt.Errorf("%w: model: %w", ErrInvalid, err)
	}
	return l, true, nil
}

// DiskDir is where the disk tier keeps its page files.
func (c Config) DiskDir() string {
	if c.Pools.DiskDir != "" {
		return c.Pools.DiskDir
	}
	return filepath.Join(c.DataDir, "disk")
}

func (c Config) validatePools() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
	}
	if _, _, err := c.Layout(); err != nil {
		errs = append(errs, err)
	}
	if _, err := tiers.ParseBackend(c.Pools.DeviceBackend); err != nil {
		bad("pools.device_backend", "%v", err)
	}
	if c.Pools.DeviceOrdinal < 0 {
		bad("pools.device_ordinal", "must not be negative, got %d", c.Pools.DeviceOrdinal)
	}
	if _, err := disk.ParseFsyncPolicy(c.Pools.DiskFsync); err != nil {
		bad("pools.disk_fsync", "%v", err)
	}
	if c.Pools.PersistOnStop < 0 {
		bad("pools.persist_on_stop", "must not be negative, got %v", c.Pools.PersistOnStop)
	}
	switch c.Pools.RemoteBackend {
	case "jetstream":
	case "redis":
		if len(c.Pools.RemoteRedis.Addrs) == 0 && c.Tiers.Remote.CapacityPages > 0 {
			bad("pools.remote_redis.addrs", "must name at least one host:port for pools.remote_backend redis")
		}
		for i, a := range c.Pools.RemoteRedis.Addrs {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				bad(fmt.Sprintf("pools.remote_redis.addrs[%d]", i), "%q is not host:port", a)
			}
		}
	default:
		bad("pools.remote_backend", "%q: want jetstream or redis", c.Pools.RemoteBackend)
	}
	if c.Pools.RemoteBucket == "" {
		bad("pools.remote_bucket", "must not be empty")
	}
	if c.Pools.RemoteMaxBytes < 0 {
		bad("pools.remote_max_bytes", "must not be negative")
	}
	if c.Pools.RemoteReplicas < 1 || c.Pools.RemoteReplicas > 5 {
		bad("pools.remote_replicas", "%d is not in 1..5", c.Pools.RemoteReplicas)
	}
	if c.Mover.Workers < 1 || c.Mover.Workers > 256 {
		bad("mover.workers", "%d is not in 1..256", c.Mover.Workers)
	}
	if c.Mover.Retries < 0 {
		bad("mover.retries", "must not be negative")
	}
	if c.Mover.RetryBackoff <= 0 {
		bad("mover.retry_backoff", "must be positive")
	}
	if c.Mover.DropWait <= 0 {
		bad("mover.drop_wait", "must be positive")
	}
	if c.Mover.StepInterval <= 0 {
		bad("mover.step_interval", "must be positive")
	}
	return errs
}
