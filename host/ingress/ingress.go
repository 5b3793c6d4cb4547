// Package ingress is the one way a directive enters the host. Every door
// (the Control socket, NATS commands, policy plugins, the engine's
// cache_control pin at Finish, the HTTP front door) is a thin adapter: it
// decodes what its transport carries, names the source and the tenant its
// transport can vouch for, and hands the rest to an Ingress, which
//
//   - refuses a caller past its door's rate limit (Admit), counted in
//     kvpilot_rate_limited_total and not audited: a flood must not flood
//     the audit log too;
//   - refuses a turn or cache_control its door refused before the executor
//     (a tenant binding, a payload that does not convert), with the same
//     reply shape and one audit record, index -1 (Refuse*);
//   - tokenizes the text replacements of splices with the host's tokenizer;
//   - applies through the executor, which audits what it applies or refuses;
//   - counts every directive by verb and result, and its latency, in the
//     directive metrics, whatever happened, a panic included.
//
// What stays with each door is what only its transport knows: who the
// caller is (a socket peer's uid, a NATS inbox, a policy's name) and which
// tenants it may act for.
package ingress

import (
	"errors"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/ratelimit"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Door names a way in. It labels rate-limit refusals.
type Door string

// The doors.
const (
	Socket  Door = "socket"
	NATS    Door = "nats"
	Policy  Door = "policy"
	Engine  Door = "engine"
	Gateway Door = "gateway"
)

// RateLimit is one door's limit per source: PerSecond calls with bursts
// of Burst (PerSecond 0 does not limit). Key is the config key that sets
// it, named in the refusal.
type RateLimit struct {
	PerSecond float64
	Burst     int
	Key       string
}

// Config configures an Ingress.
type Config struct {
	// Executor applies what gets through. Required.
	Executor *executor.Executor
	// Audit receives the record of a call a door refused before the
	// executor saw it; the host passes the executor's own log, so an
	// operator reads one trail. Nil records none.
	Audit executor.AuditLog
	// Metrics receives the directive counts and latencies; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Tokenize turns a splice's text replacement into token ids; nil
	// leaves text as it is, which the executor refuses as
	// not_supported_yet.
	Tokenize func(text string) ([]uint32, error)
	// RateLimits limits each door per source; a door not listed is not
	// limited.
	RateLimits map[Door]RateLimit
	// Log receives refusals and audit write failures; nil discards them.
	Log hclog.Logger
}

// Ingress is safe for concurrent use.
type Ingress struct {
	cfg      Config
	rec      *Recorder
	limiters map[Door]*limiter
	worker   directive.WorkerID
}

// New checks cfg and builds the ingress.
func New(cfg Config) (*Ingress, error) {
	if cfg.Executor == nil {
		return nil, errors.New("ingress: Executor is required")
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	g := &Ingress{cfg: cfg, rec: NewRecorder(cfg.Metrics), limiters: map[Door]*limiter{},
		worker: cfg.Executor.WorkerID()}
	for door, l := range cfg.RateLimits {
		if l.PerSecond < 0 {
			return nil, errors.New("ingress: " + l.Key + " must not be negative")
		}
		if l.PerSecond > 0 {
			g.limiters[door] = &limiter{Limiter: ratelimit.New(l.PerSecond, l.Burst, nil), key: l.Key}
		}
	}
	return g, nil
}

// Limits are the limits directives are checked against, for doors that
// decode payloads themselves.
func (g *Ingress) Limits() directive.Limits { return g.cfg.Executor.Limits() }

// Recorder is the ingress's metrics recorder, for a door's counts of its
// own (the socket's calls refused by a gRPC status).
func (g *Ingress) Recorder() *Recorder { return g.rec }
