package metrics

import "github.com/prometheus/client_golang/prometheus"

// Splice is what splices recompute of the tokens they keep.
type Splice struct {
	// RecomputedTokens counts kept tokens prefilled again (those the host
	// named and those the engine chose), once each splice's order is done.
	RecomputedTokens prometheus.Counter
	// RegionTokens counts the kept tokens after those splices' first
	// edits: RecomputedTokens / RegionTokens is the share recomputed.
	RegionTokens prometheus.Counter
}

func (m *Metrics) newSplice() {
	m.Splice = Splice{
		RecomputedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_splice_recomputed_tokens_total", Help: "Kept tokens splices prefilled again with the edited context (splice.recompute, the quality guard).",
		}),
		RegionTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvpilot_splice_recompute_region_tokens_total", Help: "Kept tokens after the first edit of the splices that recomputed: the denominator of the share recomputed.",
		}),
	}
	m.Registry.MustRegister(m.Splice.RecomputedTokens, m.Splice.RegionTokens)
}
