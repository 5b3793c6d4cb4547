package ingress

import (
	"time"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Recorder counts directives by verb and result and observes their latency
// on the host's metrics. A nil *Recorder records nothing, so transports can
// run without metrics in tests.
type Recorder struct {
	m *metrics.Metrics
}

// NewRecorder records into m; a nil m gives a nil Recorder.
func NewRecorder(m *metrics.Metrics) *Recorder {
	if m == nil {
		return nil
	}
	return &Recorder{m: m}
}

// ResultOK is the result label of an applied directive; refused ones are
// labelled with their error code.
const ResultOK = "ok"

// LabelTurn is the latency label of a turn of several directives: a turn is
// one transaction, so its time is not split between its verbs.
const LabelTurn = "turn"

// Directive counts one directive's outcome: code "" means applied. Pins
// refused for budget, quota or an unknown block also count as pin
// rejections.
func (r *Recorder) Directive(verb string, code errcode.Code, pin bool) {
	if r == nil {
		return
	}
	result := ResultOK
	if code != "" {
		result = string(code)
	}
	r.m.Directives.WithLabelValues(verb, result).Inc()
	if !pin {
		return
	}
	switch code {
	case errcode.PinBudgetExhausted:
		r.m.PinRejections.WithLabelValues("budget").Inc()
	case errcode.TenantQuota:
		r.m.PinRejections.WithLabelValues("quota").Inc()
	case errcode.UnknownBlock:
		r.m.PinRejections.WithLabelValues("unknown").Inc()
	}
}

// Latency observes how long a directive, a turn or a cache_control request
// took end to end inside the host.
func (r *Recorder) Latency(label string, d time.Duration) {
	if r == nil {
		return
	}
	r.m.DirectiveLatency.WithLabelValues(label).Observe(d.Seconds())
}

// Turn records a turn's reply: one count per directive, and the turn's
// latency under its verb when it has one directive, LabelTurn otherwise.
// pins says which directives were pins, for pin rejections (nil: none).
func (r *Recorder) Turn(reply directive.TurnReply, pins func(i int) bool, elapsed time.Duration) {
	if r == nil {
		return
	}
	label := LabelTurn
	for i, res := range reply.Results {
		var code errcode.Code
		if res.Error != nil {
			code = res.Error.Code
		}
		r.Directive(verbLabel(string(res.Verb)), code, pins != nil && pins(i))
		if len(reply.Results) == 1 {
			label = verbLabel(string(res.Verb))
		}
	}
	if len(reply.Results) == 0 && reply.Error != nil {
		// Refused before any directive was decoded (malformed, too large).
		r.Directive("undecoded", reply.Error.Code, false)
		label = "undecoded"
	}
	r.Latency(label, elapsed)
}

// CacheControl records a cache_control request under its action.
func (r *Recorder) CacheControl(action directive.Action, reply directive.CacheControlReply, elapsed time.Duration) {
	if r == nil {
		return
	}
	label := "cache_control"
	if known(action) {
		label = string(action)
	}
	pin := action == directive.ActionPinBlocks || action == directive.ActionPinPrefix
	r.Directive(label, reply.Code, pin)
	r.Latency(label, elapsed)
}

// RateLimited counts one call or command the per-source rate limit refused
// at door.
func (r *Recorder) RateLimited(door Door) {
	if r == nil {
		return
	}
	r.m.RateLimited.WithLabelValues(string(door)).Inc()
}

// IsPin reports whether d asks for a pin, for pin-rejection counts.
func IsPin(d directive.Directive) bool {
	switch d := d.(type) {
	case directive.Cache:
		return d.Pin
	case directive.Pin:
		return true
	}
	return false
}

// verbLabel keeps label cardinality bounded: a verb the host does not know
// (a refused, hostile "type") is counted as "unknown".
func verbLabel(v string) string {
	if directive.Verb(v).Known() {
		return v
	}
	if v == "" {
		return "undecoded"
	}
	return "unknown"
}

func known(a directive.Action) bool {
	for _, k := range directive.Actions {
		if a == k {
			return true
		}
	}
	return false
}
