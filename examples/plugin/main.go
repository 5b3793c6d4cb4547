// Command plugin is an example external kvpilot policy, built only from
// sdk/: it keeps every session's system prompt warm by asking the host to
// retain it (a soft pin) at a configurable priority.
//
// Build it, take its sha256, and list it under `policies` in the host
// config; README.md walks through it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

func main() { policy.Serve(&retainSystem{}) }

// retainSystem retains the leading system message of every request.
//
// Parameters:
//
//	priority  int       retention priority 0..100 (default 80)
//	duration  duration  how long each retention lasts (default "10m")
type retainSystem struct {
	priority int
	duration directive.TTL
	// seen avoids re-sending the same retention for every request.
	seen map[string]int64
}

func (*retainSystem) Info() policy.Info {
	return policy.Info{Name: "retain-system", Version: "0.1.0", Subscriptions: []policy.Kind{policy.KindRequestStarted}}
}

func (p *retainSystem) Configure(raw json.RawMessage) error {
	params := struct {
		Priority *int           `json:"priority"`
		Duration *directive.TTL `json:"duration"`
	}{}
	if err := policy.DecodeParams(raw, &params); err != nil {
		return err
	}
	p.priority, p.duration = 80, directive.TTL(10*time.Minute)
	if params.Priority != nil {
		p.priority = *params.Priority
	}
	if params.Duration != nil {
		p.duration = *params.Duration
	}
	if p.priority < 0 || p.priority > 100 {
		return fmt.Errorf("priority %d: want 0..100", p.priority)
	}
	p.seen = map[string]int64{}
	return nil
}

func (p *retainSystem) Observe(_ context.Context, obs policy.Observation) ([]policy.Directive, error) {
	ms := obs.Started.Messages
	if len(ms) == 0 || ms[0].Role != "system" || ms[0].Span.Len() <= 0 {
		return nil, nil
	}
	end := ms[0].Span.End
	if p.seen[obs.Session] == end {
		return nil, nil
	}
	p.seen[obs.Session] = end
	policy.Logger().Debug("retaining system prompt", "session", obs.Session, "tokens", end)
	d := p.duration
	return []policy.Directive{directive.Retain{Session: obs.Session, Start: 0, End: end, Priority: p.priority, Duration: &d}}, nil
}
