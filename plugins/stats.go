package plugins

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvpilot/kvpilot/host/metrics"
)

// Drop reasons.
const (
	DropQueueFull = "queue_full" // the policy's queue was full when it arrived
	DropFailed    = "failed"     // MaxAttempts deliveries failed (crash, hang, or bad reply)
	DropStopped   = "stopped"    // the runtime stopped before a plugin could take it
)

// Stats are one policy's counters. Accepted = Delivered + the Dropped
// counts + Pending, always.
type Stats struct {
	Accepted  uint64
	Delivered uint64
	Dropped   map[string]uint64
	Pending   uint64
	// PolicyErrors counts observations the policy answered with an error
	// (they count as delivered).
	PolicyErrors uint64
	// Turns counts turns handed to the sink; TurnErrors those it refused.
	Turns, TurnErrors uint64
	Restarts          uint64
}

// DroppedTotal sums Dropped.
func (s Stats) DroppedTotal() uint64 {
	var n uint64
	for _, v := range s.Dropped {
		n += v
	}
	return n
}

func (s Stats) add(o Stats) Stats {
	d := map[string]uint64{}
	for k, v := range s.Dropped {
		d[k] += v
	}
	for k, v := range o.Dropped {
		d[k] += v
	}
	return Stats{
		Accepted: s.Accepted + o.Accepted, Delivered: s.Delivered + o.Delivered, Dropped: d,
		Pending: s.Pending + o.Pending, PolicyErrors: s.PolicyErrors + o.PolicyErrors,
		Turns: s.Turns + o.Turns, TurnErrors: s.TurnErrors + o.TurnErrors, Restarts: s.Restarts + o.Restarts,
	}
}

// observationMetrics are the runtime's Prometheus counters beyond
// host/metrics' PluginRestarts.
type observationMetrics struct {
	restarts     *prometheus.CounterVec
	observations *prometheus.CounterVec // policy, result: delivered or dropped_<reason>
	turns        *prometheus.CounterVec // policy, result: ok or error
}

func newObservationMetrics(m *metrics.Metrics) (*observationMetrics, error) {
	om := &observationMetrics{
		restarts: m.PluginRestarts,
		observations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_plugin_observations_total", Help: "Observations per policy plugin, by outcome (delivered, dropped_<reason>).",
		}, []string{"policy", "result"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvpilot_plugin_turns_total", Help: "Directive turns from policy plugins handed to the executor, by result.",
		}, []string{"policy", "result"}),
	}
	// A second runtime on the same registry (a host restarted in-process)
	// shares the first one's counters.
	for _, c := range []**prometheus.CounterVec{&om.observations, &om.turns} {
		if err := m.Registry.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	return om, nil
}
