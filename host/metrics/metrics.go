// Package metrics holds the host's Prometheus registry and the names of the
// metrics every component reports. Components receive the *Metrics at
// construction; nothing registers into the global registry, so tests can
// build as many hosts as they like.
//
// Names follow Prometheus' conventions: base units (seconds, bytes) in the
// name, counters end in _total, histograms of time end in
// _duration_seconds. A directive's verb label is spelled as the SDK spells
// it on the wire: the directive's "type" (Cache, Pause, Splice, ...) or the
// cache_control action (pin_prefix, ...).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the set of collectors one host exports.
type Metrics struct {
	Registry *prometheus.Registry

	// PinRejections counts pins refused, by reason (budget, quota, unknown).
	PinRejections *prometheus.CounterVec
	// Directives counts directives by verb and result (ok or an error code).
	Directives *prometheus.CounterVec
	// DirectiveLatency observes directive execution time by verb.
	DirectiveLatency *prometheus.HistogramVec
	// RateLimited counts calls and commands the per-source rate limit
	// refused, by transport (socket or nats).
	RateLimited *prometheus.CounterVec
	// TransferBytes counts bytes copied between tiers, by source and
	// destination tier.
	TransferBytes *prometheus.CounterVec
	// TransferLatency observes one page copy between tiers, by source and
	// destination.
	TransferLatency *prometheus.HistogramVec
	// TransferFailures counts transfers that failed, by source and
	// destination tier (a drop's are the same tier).
	TransferFailures *prometheus.CounterVec
	// EngineTokens counts prompt tokens of matched requests by kind:
	// matched (served from the cache), prefilled (not: the engine computes
	// them) and loaded (those of the matched ones that were brought back
	// from a colder tier first). matched / (matched + prefilled) is the
	// token hit rate.
	EngineTokens *prometheus.CounterVec
	// LoadBackLatency observes how long a Match waited for its pages to
	// come back to the device tier (only Matches that had to).
	LoadBackLatency prometheus.Histogram
	// EngineRequests counts engine protocol calls by call (Match,
	// Commit, ...) and outcome (ok or an error code).
	EngineRequests *prometheus.CounterVec
	// PluginRestarts counts policy plugin restarts by policy name.
	PluginRestarts *prometheus.CounterVec
	// EventsPublished counts KV events handed to NATS (sent, or held in
	// the client's reconnect buffer during an outage).
	EventsPublished prometheus.Counter
	// EventsFailed counts KV events NATS subscribers will never see: the
	// connection was closed or the reconnect buffer full. Routers see the
	// gap in event_id and resync; a rising count says the buffer is too
	// small for the outages this host lives through.
	EventsFailed prometheus.Counter
	// EventWatchersOverflowed counts WatchEvents watchers ended because
	// they fell a whole buffer behind the event stream.
	EventWatchersOverflowed prometheus.Counter
	// Gateway is the front door's (gateway.go).
	Gateway Gateway
	// Splice is what splices recompute (splice.go).
	Splice Splice
}

// Label values of EngineTokens' kind.
const (
	TokensMatched   = "matched"
	TokensLoaded    = "loaded"
	TokensPrefilled = "prefilled"
)

// latencyBuckets span a directive's or a page copy's time: a microsecond
// (an index-only verb, a memcpy) to seconds (a remote tier, a big pause).
var latencyBuckets = []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5}

// loadBackBuckets span a load-back: a few pages from host memory (tens of
// microseconds) to the engine's deadline (2 s by default).
var loadBackBuckets = []float64{5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5}

// New builds a registry with the Go runtime and process collectors plus
// kvpilot's own.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{Registry: r}
	m.newDirectives()
	m.newTransfers()
	m.newEngine()
	m.newPluginsAndEvents()
	m.newGateway()
	m.newSplice()
	r.MustRegister(m.PinRejections, m.Directives, m.DirectiveLatency, m.RateLimited,
		m.TransferBytes, m.TransferLatency, m.TransferFailures,
		m.EngineTokens, m.LoadBackLatency, m.EngineRequests,
		m.PluginRestarts, m.EventsPublished, m.EventsFailed, m.EventWatchersOverflowed)
	return m
}

func (m *Metrics) newDirectives() {
	m.PinRejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_pin_rejections_total", Help: "Pins refused, by reason.",
	}, []string{"reason"})
	m.Directives = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_directives_total", Help: "Directives executed, by verb and result (ok or an error code).",
	}, []string{"verb", "result"})
	m.DirectiveLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kvpilot_directive_duration_seconds", Help: "Directive execution time inside the host, by verb.", Buckets: latencyBuckets,
	}, []string{"verb"})
	m.RateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_rate_limited_total", Help: "Calls and commands refused by the per-source rate limit, by transport.",
	}, []string{"transport"})
}

func (m *Metrics) newTransfers() {
	m.TransferBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_transfer_bytes_total", Help: "Bytes copied between tiers, by source and destination tier.",
	}, []string{"from", "to"})
	m.TransferLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kvpilot_transfer_duration_seconds", Help: "Time of one page copy between tiers, by source and destination tier.", Buckets: latencyBuckets,
	}, []string{"from", "to"})
	m.TransferFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_transfer_failures_total", Help: "Transfers between tiers that failed, by source and destination tier.",
	}, []string{"from", "to"})
}

func (m *Metrics) newEngine() {
	m.EngineTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_engine_tokens_total",
		Help: "Prompt tokens of matched requests: matched (served from the cache), prefilled (computed by the engine), loaded (matched tokens brought back from a colder tier).",
	}, []string{"kind"})
	m.LoadBackLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "kvpilot_engine_load_back_duration_seconds", Help: "Time a Match waited for its pages to come back to the device tier.", Buckets: loadBackBuckets,
	})
	m.EngineRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_engine_requests_total", Help: "Engine protocol calls, by call and outcome (ok or an error code).",
	}, []string{"call", "outcome"})
}

func (m *Metrics) newPluginsAndEvents() {
	m.PluginRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvpilot_plugin_restarts_total", Help: "Policy plugin restarts, by policy.",
	}, []string{"policy"})
	m.EventsPublished = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvpilot_events_published_total", Help: "KV events handed to NATS.",
	})
	m.EventsFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvpilot_events_failed_total", Help: "KV events not published to NATS (connection closed or reconnect buffer full).",
	})
	m.EventWatchersOverflowed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kvpilot_event_watchers_overflowed_total", Help: "WatchEvents watchers ended for falling a buffer behind.",
	})
}

// ObserveCopy records one page copy between tiers (the mover's OnCopy):
// its bytes and its time, by source and destination tier.
func (m *Metrics) ObserveCopy(from, to string, bytes int64, took time.Duration) {
	m.TransferBytes.WithLabelValues(from, to).Add(float64(bytes))
	m.TransferLatency.WithLabelValues(from, to).Observe(took.Seconds())
}

// CountTransferFailure records one failed transfer (the mover's
// OnFailure), by source and destination tier.
func (m *Metrics) CountTransferFailure(from, to string) {
	m.TransferFailures.WithLabelValues(from, to).Inc()
}
