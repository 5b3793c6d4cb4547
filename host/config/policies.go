package config

import (
	"fmt"
	"time"
)

// PolicyRuntime configures how the host runs policy plugins.
type PolicyRuntime struct {
	// TickInterval is how often policies receive a Tick (and tier pressure
	// for tiers above their high watermark).
	TickInterval time.Duration `koanf:"tick_interval"`
	// CallTimeout bounds every call into a plugin; a plugin past it is
	// killed and restarted.
	CallTimeout time.Duration `koanf:"call_timeout"`
	// QueueSize is observations queued per policy before drops are counted.
	QueueSize int `koanf:"queue_size"`
}

func (c Config) validatePolicyRuntime() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
	}
	if c.PolicyRuntime.TickInterval <= 0 {
		bad("policy_runtime.tick_interval", "must be positive")
	}
	if c.PolicyRuntime.CallTimeout <= 0 {
		bad("policy_runtime.call_timeout", "must be positive")
	}
	if c.PolicyRuntime.QueueSize < 1 {
		bad("policy_runtime.queue_size", "must be at least 1")
	}
	return errs
}
