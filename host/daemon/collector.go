package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvpilot/kvpilot/host/cache"
)

// indexCollector reports the cache index's per-tier gauges at scrape time,
// reading one consistent Stats snapshot under the host lock.
type indexCollector struct {
	c *core
	// pageBytes is the open layout's page size, 0 before pools open.
	pageBytes func() int64
}

var (
	descBlocks   = prometheus.NewDesc("kvpilot_blocks", "Pages resident per tier.", []string{"tier"}, nil)
	descCapacity = prometheus.NewDesc("kvpilot_tier_capacity_blocks", "Tier capacity in pages.", []string{"tier"}, nil)
	descPinned   = prometheus.NewDesc("kvpilot_pinned_blocks", "Pinned pages resident per tier.", []string{"tier"}, nil)
	descPinnedB  = prometheus.NewDesc("kvpilot_pinned_bytes", "Bytes of pinned pages resident per tier (0 before the pools open).", []string{"tier"}, nil)
	descLeased   = prometheus.NewDesc("kvpilot_leased_blocks", "Leased (paused) pages resident per tier.", []string{"tier"}, nil)
	descLeases   = prometheus.NewDesc("kvpilot_leases", "Live pause leases.", nil, nil)
	descDegraded = prometheus.NewDesc("kvpilot_leases_degraded", "Leases whose pages could not be moved to the pause tier (their pages are evictable).", nil, nil)
	descPinBudg  = prometheus.NewDesc("kvpilot_pin_budget_blocks", "Distinct pages pins may hold.", nil, nil)
	descInFlight = prometheus.NewDesc("kvpilot_transitions_in_flight", "Tier transitions planned and not yet completed.", nil, nil)
	descEvQueue  = prometheus.NewDesc("kvpilot_event_queue_length", "KV events waiting to be published.", nil, nil)
)

func (ic *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBlocks, descCapacity, descPinned, descPinnedB, descLeased, descLeases, descDegraded, descPinBudg, descInFlight, descEvQueue} {
		ch <- d
	}
}

func (ic *indexCollector) Collect(ch chan<- prometheus.Metric) {
	var (
		st       cache.Stats
		degraded int
	)
	ic.c.index.Do(func(ix *cache.Index) { st, degraded = ix.Stats(), len(ix.DegradedLeases()) })
	bpp := float64(ic.pageBytes())
	for _, t := range st.Tiers {
		name := t.Tier.String()
		ch <- prometheus.MustNewConstMetric(descBlocks, prometheus.GaugeValue, float64(t.Pages), name)
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(t.Capacity), name)
		ch <- prometheus.MustNewConstMetric(descPinned, prometheus.GaugeValue, float64(t.Pinned), name)
		ch <- prometheus.MustNewConstMetric(descPinnedB, prometheus.GaugeValue, float64(t.Pinned)*bpp, name)
		ch <- prometheus.MustNewConstMetric(descLeased, prometheus.GaugeValue, float64(t.Leased), name)
	}
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(st.Leases))
	ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, float64(degraded))
	ch <- prometheus.MustNewConstMetric(descPinBudg, prometheus.GaugeValue, float64(st.PinBudget))
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(descEvQueue, prometheus.GaugeValue, float64(ic.c.events.Len()))
}
