package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/policies"
	"github.com/kvpilot/kvpilot/sdk/kvevent"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// CheckBuiltin is how Validate checks a built-in policy's name and params:
// it configures one as its process will (policies.Check). A test that runs
// built-ins of its own replaces it.
var CheckBuiltin = policies.Check

// Validate checks every value's range. Each error names its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if hclog.LevelFromString(c.Log.Level) == hclog.NoLevel {
		bad("log.level", "%q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "json", "text":
	default:
		bad("log.format", "%q is not one of auto, json, text", c.Log.Format)
	}
	if c.Index.PageSize <= 0 || c.Index.PageSize > 4096 {
		bad("index.page_size", "%d is not in 1..4096", c.Index.PageSize)
	}
	switch c.Index.WritePolicy {
	case "write-through", "write-back", "none":
	default:
		bad("index.write_policy", "%q is not one of write-through, write-back, none", c.Index.WritePolicy)
	}
	switch c.Index.PauseTier {
	case "host", "disk", "remote":
	default:
		bad("index.pause_tier", "%q is not one of host, disk, remote", c.Index.PauseTier)
	}
	if c.Index.SinkTokens < 0 || c.Index.SinkTokens > 1<<20 {
		bad("index.sink_tokens", "%d is not in 0..%d", c.Index.SinkTokens, 1<<20)
	}
	if c.Index.SweepInterval <= 0 {
		bad("index.sweep_interval", "must be positive, got %v", c.Index.SweepInterval)
	}
	for _, t := range []struct {
		name string
		t    Tier
	}{{"device", c.Tiers.Device}, {"host", c.Tiers.Host}, {"disk", c.Tiers.Disk}, {"remote", c.Tiers.Remote}} {
		key := "tiers." + t.name
		if t.t.CapacityPages < 0 {
			bad(key+".capacity_pages", "must not be negative, got %d", t.t.CapacityPages)
		}
		if !(t.t.LowWatermark > 0 && t.t.LowWatermark <= t.t.HighWatermark && t.t.HighWatermark <= 1) {
			bad(key+".low_watermark", "watermarks need 0 < low (%v) <= high (%v) <= 1", t.t.LowWatermark, t.t.HighWatermark)
		}
		if !(t.t.PinBudget >= 0 && t.t.PinBudget <= 1) {
			bad(key+".pin_budget", "%v is not a fraction in [0, 1]", t.t.PinBudget)
		}
	}
	c.validateGateway(bad)
	c.validateSplice(bad)
	if c.Tiers.Device.CapacityPages == 0 {
		bad("tiers.device.capacity_pages", "the device tier cannot be disabled")
	}
	if err := c.TTLPolicy().Validate(); err != nil {
		bad("pins.default_ttl", "%v (check pins.min_ttl and pins.max_ttl too)", err)
	}
	if c.Pins.TenantQuotaPages < 0 {
		bad("pins.tenant_quota_pages", "must not be negative, got %d", c.Pins.TenantQuotaPages)
	}
	if c.Events.Format != EventsDynamo && c.Events.Format != EventsJSON {
		bad("events.format", "%q is not an event format (want %q or %q)", c.Events.Format, EventsDynamo, EventsJSON)
	}
	for key, v := range map[string]string{"events.namespace": c.Events.Namespace, "events.component": c.Events.Component, "events.endpoint": c.Events.Endpoint} {
		if v == "" || strings.ContainsAny(v, ".*> \t\r\n") {
			bad(key, "%q must be a non-empty NATS subject token (no '.', '*', '>' or spaces)", v)
		}
	}
	for key, v := range map[string]string{"nats.worker_subject": c.NATS.WorkerSubject, "nats.broadcast_subject": c.NATS.BroadcastSubject} {
		if v == "" || strings.ContainsAny(v, "*> \t\r\n") || strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") {
			bad(key, "%q is not a NATS subject without wildcards", v)
		}
	}
	if c.NATS.RateLimit < 0 {
		bad("nats.rate_limit", "must not be negative, got %v", c.NATS.RateLimit)
	}
	if c.NATS.RateBurst < 1 {
		bad("nats.rate_burst", "must be at least 1, got %d", c.NATS.RateBurst)
	}
	if c.NATS.CommandReplicas < 1 || c.NATS.CommandReplicas > 5 {
		bad("nats.command_replicas", "%d is not in 1..5", c.NATS.CommandReplicas)
	}
	if c.NATS.JetStreamCommands && c.NATS.CommandStream == "" {
		bad("nats.command_stream", "must name a stream when nats.jetstream_commands is on")
	}
	for i, u := range c.Control.AllowUIDs {
		if u < 0 {
			bad(fmt.Sprintf("control.allow_uids[%d]", i), "uid %d is negative", u)
		}
	}
	errs = append(errs, c.validateTenancy()...)
	errs = append(errs, c.validatePools()...)
	errs = append(errs, c.validatePolicyRuntime()...)
	if c.GCPercent < 25 || c.GCPercent > 10000 {
		bad("gc_percent", "%d is not in 25..10000", c.GCPercent)
	}
	errs = append(errs, c.validateEngine()...)
	seen := map[string]bool{}
	for i, p := range c.Policies {
		key := fmt.Sprintf("policies[%d]", i)
		switch {
		case strings.TrimSpace(p.Name) == "":
			bad(key+".name", "must not be empty")
		case seen[p.Name]:
			bad(key+".name", "%q is used twice; names identify instances", p.Name)
		}
		seen[p.Name] = true
		switch {
		case (p.Builtin == "") == (p.Path == ""):
			bad(key+".builtin", "set exactly one of builtin and path")
		case p.Path != "" && !isSHA256(p.SHA256):
			bad(key+".sha256", "an external plugin needs the hex sha256 of %s (sha256sum prints it)", p.Path)
		case p.Builtin != "":
			// A built-in is checked here as its process will configure it;
			// an external plugin's params are its own to check at start.
			if err := CheckBuiltin(p.Builtin, p.Params); errors.Is(err, policies.ErrUnknown) {
				bad(key+".builtin", "%v", err)
			} else if err != nil {
				bad(key+".params", "%s: %v", p.Builtin, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return false
		}
	}
	return true
}

// TTLPolicy returns the pin TTL default and clamps.
func (c Config) TTLPolicy() ttl.Policy {
	return ttl.Policy{Default: c.Pins.DefaultTTL, Min: c.Pins.MinTTL, Max: c.Pins.MaxTTL}
}

// WorkerSubject is the NATS subject of this worker's commands.
func (c Config) WorkerSubject() string {
	return strings.ReplaceAll(c.NATS.WorkerSubject, "{worker_id}", strconv.FormatUint(c.WorkerID, 10))
}

// ControlSocket is the Control service's socket path.
func (c Config) ControlSocket() string {
	if c.Control.Socket != "" {
		return c.Control.Socket
	}
	return filepath.Join(c.DataDir, "run", "control.sock")
}

// EventsSubject is the NATS subject KV events are published on, which
// depends on events.format: Dynamo's router reads an endpoint's subject,
// the JSON form keeps the component's.
func (c Config) EventsSubject() string {
	if c.Events.Format == EventsJSON {
		return "namespace." + c.Events.Namespace + ".component." + c.Events.Component + ".kv-events"
	}
	return kvevent.DynamoSubject(c.Events.Namespace, c.Events.Component, c.Events.Endpoint)
}
