package metrics

import "github.com/prometheus/client_golang/prometheus"

// Gateway is what the front door reports: its requests by API and status,
// their time, and the context edits it applied (a harness sees the same
// per request in applied_edits; these are the host's totals).
type Gateway struct {
	// Requests counts front-door requests by API (openai, anthropic,
	// models) and HTTP status code.
	Requests *prometheus.CounterVec
	// Duration observes a request from its arrival to the end of its
	// response (a streamed one's last event), by API.
	Duration *prometheus.HistogramVec
	// Clears counts items cleared for the first time in a session, by
	// edit type (clear_tool_uses_20250919, clear_thinking_20251015):
	// each is paid for once, then sticks.
	Clears *prometheus.CounterVec
	// ClearedTokens counts the input tokens those first clears removed,
	// by edit type.
	ClearedTokens *prometheus.CounterVec
	// EngineSplices counts the edits the front door splices itself on an
	// engine that serves no fill orders (vLLM's connector), by outcome:
	// spliced, or the step that failed (tokenize, prefill, unsaved: the
	// prefill's pages never reached the host, splice).
	EngineSplices *prometheus.CounterVec
	// PrefilledTokens counts the tokens of those splices' prefill requests.
	PrefilledTokens prometheus.Counter
	// SaveWaits counts the edited turns that looked for the saves of their
	// session's previous turn before splicing, by outcome: ready (saved
	// already), waited (saved within gateway.await_saves), gave_up.
	SaveWaits *prometheus.CounterVec
	// SaveWaitSeconds sums the time those turns waited.
	SaveWaitSeconds prometheus.Counter
	// Pins counts the pins of breakpoints (Anthropic's cache_control,
	// OpenAI's prompt caching fields), by outcome: pinned, clamped (the
	// host's pins.min_ttl or max_ttl changed the TTL asked for), refused.
	Pins *prometheus.CounterVec
}

// requestBuckets span a front-door request: a cached turn's first token
// (milliseconds) to a long generation (minutes).
var requestBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

func (m *Metrics) newGateway() {
	m.Gateway = Gateway{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_requests_total", Help: "Front-door requests, by API and HTTP status code.",
		}, []string{"api", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvpilot_gateway_request_duration_seconds", Help: "Front-door request time to the end of the response, by API.", Buckets: requestBuckets,
		}, []string{"api"}),
		Clears: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_clears_total", Help: "Context items the front door cleared for the first time in their session, by edit type.",
		}, []string{"type"}),
		ClearedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_cleared_tokens_total", Help: "Input tokens removed by first-time clears, by edit type.",
		}, []string{"type"}),
		EngineSplices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_engine_splices_total", Help: "Edits the front door spliced on a connector-mode engine, by outcome (spliced, or the failed step: tokenize, prefill, unsaved, splice).",
		}, []string{"outcome"}),
		PrefilledTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_gateway_prefilled_tokens_total", Help: "Tokens of the prefill requests the front door sent ahead of its splices.",
		}),
		SaveWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_save_waits_total", Help: "Edited turns that looked for their session's previous saves before splicing, by outcome (ready, waited, gave_up).",
		}, []string{"outcome"}),
		SaveWaitSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_gateway_save_wait_seconds_total", Help: "Time edited turns waited for their session's previous saves.",
		}),
		Pins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_gateway_pins_total", Help: "Pins of request breakpoints (cache_control, prompt caching fields), by outcome (pinned, clamped, refused).",
		}, []string{"outcome"}),
	}
	m.Registry.MustRegister(m.Gateway.Requests, m.Gateway.Duration, m.Gateway.Clears, m.Gateway.ClearedTokens,
		m.Gateway.EngineSplices, m.Gateway.PrefilledTokens, m.Gateway.SaveWaits, m.Gateway.SaveWaitSeconds, m.Gateway.Pins)
}
