// Package metrics holds the host's Prometheus registry and the names of the
// metrics every component reports (DESIGN.md §8). Components receive the
// *Metrics at construction; nothing registers into the global registry, so
// tests can build as many hosts as they like.
package metrics

import (
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
	// TransferBytes counts bytes moved between tiers, by source and
	// destination tier.
	TransferBytes *prometheus.CounterVec
	// TransferLatency observes one batch transfer, by source and destination.
	TransferLatency *prometheus.HistogramVec
	// TransferFailures counts transfers that failed, by source and
	// destination tier (a drop's are the same tier).
	TransferFailures *prometheus.CounterVec
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
}

// New builds a registry with the Go runtime and process collectors plus
// kvpilot's own.
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	latency := []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 5e-3, 0.025, 0.1, 0.5, 2.5}
	m := &Metrics{
		Registry: r,
		PinRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_pin_rejections_total", Help: "Pins refused, by reason.",
		}, []string{"reason"}),
		Directives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_directives_total", Help: "Directives executed, by verb and result.",
		}, []string{"verb", "result"}),
		DirectiveLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvpilot_directive_seconds", Help: "Directive execution time, by verb.", Buckets: latency,
		}, []string{"verb"}),
		TransferBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_transfer_bytes_total", Help: "Bytes moved between tiers.",
		}, []string{"from", "to"}),
		TransferLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvpilot_transfer_seconds", Help: "Batch transfer time between tiers.", Buckets: latency,
		}, []string{"from", "to"}),
		TransferFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_transfer_failures_total", Help: "Transfers between tiers that failed, by source and destination tier.",
		}, []string{"from", "to"}),
		PluginRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_plugin_restarts_total", Help: "Policy plugin restarts, by policy.",
		}, []string{"policy"}),
		EventsPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_events_published_total", Help: "KV events handed to NATS.",
		}),
		EventsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_events_failed_total", Help: "KV events not published to NATS (connection closed or reconnect buffer full).",
		}),
		EventWatchersOverflowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_event_watchers_overflowed_total", Help: "WatchEvents watchers ended for falling a buffer behind.",
		}),
	}
	r.MustRegister(m.PinRejections, m.Directives, m.DirectiveLatency, m.TransferBytes, m.TransferLatency, m.TransferFailures, m.PluginRestarts,
		m.EventsPublished, m.EventsFailed, m.EventWatchersOverflowed)
	return m
}
