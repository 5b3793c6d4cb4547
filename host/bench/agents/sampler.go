package agents

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// HostSample is the host at one moment of an arm.
type HostSample struct {
	T        float64          `json:"t_s"`
	RSSBytes int64            `json:"rss_bytes,omitempty"`
	Pages    map[string]int64 `json:"pages,omitempty"`
	// KvpilotHits is the engine's count so far of prompt tokens kvpilot
	// loaded (vLLM's external prefix cache hits).
	KvpilotHits float64 `json:"kvpilot_hit_tokens,omitempty"`
}

// HostTrace is the host's memory and tiers over an arm, sampled every
// half second: its resident memory (the host process's; 0 while it is
// down), its pages per tier against their capacities, and whether its
// memory grew with the requests served (the second half's peak against
// the first half's).
type HostTrace struct {
	CapacityPages map[string]int64 `json:"capacity_pages"`
	// MemoryBoundBytes is what the host's memory tiers may hold (its
	// staging and host tiers at capacity, vLLM's page size), and
	// WithinBound whether its resident memory stayed under that plus
	// hostBaseBytes for the process itself (0: not known here).
	MemoryBoundBytes  int64            `json:"memory_bound_bytes,omitempty"`
	WithinBound       *bool            `json:"rss_within_bound,omitempty"`
	PeakPages         map[string]int64 `json:"peak_pages"`
	PeakRSSBytes      int64            `json:"peak_rss_bytes,omitempty"`
	FirstHalfPeakRSS  int64            `json:"first_half_peak_rss_bytes,omitempty"`
	SecondHalfPeakRSS int64            `json:"second_half_peak_rss_bytes,omitempty"`
	Samples           []HostSample     `json:"samples"`
}

// hostBaseBytes is the host process's own memory beside its tiers' (its
// code, index and buffers; about 30 MiB idle), allowed over the bound.
const hostBaseBytes = 128 << 20

// bound sets the memory bound from the pages the tiers hold in memory.
func (tr *HostTrace) bound(pageBytes int64) {
	tr.MemoryBoundBytes = (tr.CapacityPages["device"] + tr.CapacityPages["host"]) * pageBytes
	ok := tr.PeakRSSBytes <= tr.MemoryBoundBytes+hostBaseBytes
	tr.WithinBound = &ok
}

// sampler polls a host while an arm runs.
type sampler struct {
	control string
	// capacity is the host's configured pages per tier.
	capacity map[string]int64
	rss      func() int64
	hits     func(context.Context) float64

	mu      sync.Mutex
	samples []HostSample
}

// run samples every period until ctx ends, and once more then.
func (s *sampler) run(ctx context.Context, started time.Time, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	s.sample(ctx, started)
	for {
		select {
		case <-ctx.Done():
			s.sample(context.Background(), started)
			return
		case <-t.C:
			s.sample(ctx, started)
		}
	}
}

func (s *sampler) sample(ctx context.Context, started time.Time) {
	hs := HostSample{T: time.Since(started).Seconds()}
	if s.rss != nil {
		hs.RSSBytes = s.rss()
	}
	if s.hits != nil {
		hs.KvpilotHits = s.hits(ctx)
	}
	// A dial per sample: a fault restarts the host behind the socket.
	if c, err := controlclient.DialUnix(s.control, controlclient.UnixOptions{Source: "bench-agents"}); err == nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if st, err := c.Stats(sctx); err == nil {
			hs.Pages = map[string]int64{}
			for _, t := range st.Tiers {
				hs.Pages[t.Tier] = t.Pages
			}
		}
		cancel()
		c.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, hs)
}

// trace sums the samples.
func (s *sampler) trace() *HostTrace {
	s.mu.Lock()
	defer s.mu.Unlock()
	tr := &HostTrace{CapacityPages: s.capacity, PeakPages: map[string]int64{}, Samples: s.samples}
	for i, hs := range s.samples {
		tr.PeakRSSBytes = max(tr.PeakRSSBytes, hs.RSSBytes)
		if i < len(s.samples)/2 {
			tr.FirstHalfPeakRSS = max(tr.FirstHalfPeakRSS, hs.RSSBytes)
		} else {
			tr.SecondHalfPeakRSS = max(tr.SecondHalfPeakRSS, hs.RSSBytes)
		}
		for k, v := range hs.Pages {
			tr.PeakPages[k] = max(tr.PeakPages[k], v)
		}
	}
	return tr
}

// chart draws the pages per tier over the arm.
func (tr *HostTrace) chart(arm string) scenario.Chart {
	c := scenario.Chart{Title: fmt.Sprintf("%s: pages per tier", arm), Unit: "pages", XUnit: "s"}
	for _, tier := range []string{"device", "host", "disk", "remote"} {
		if tr.PeakPages[tier] == 0 {
			continue
		}
		s := scenario.Series{Name: tier}
		for _, hs := range tr.Samples {
			if hs.Pages != nil {
				s.Points = append(s.Points, scenario.Point{X: hs.T, Y: float64(hs.Pages[tier])})
			}
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// FaultReport is what a fault of the host did to an arm: when it came,
// when the host was back, and how long after that kvpilot's hits came
// back (the engine's count of tokens kvpilot loaded rising again; -1: not
// within the arm). The arm's failed requests are its own count.
type FaultReport struct {
	Kind              string  `json:"kind"`
	AtS               float64 `json:"at_s"`
	RestartedAtS      float64 `json:"restarted_at_s"`
	HitsResumedAfterS float64 `json:"hits_resumed_after_s"`
	Error             string  `json:"error,omitempty"`
}

// resumed fills HitsResumedAfterS from the samples.
func (f *FaultReport) resumed(samples []HostSample) {
	f.HitsResumedAfterS = -1
	base := -1.0
	for _, hs := range samples {
		if hs.T < f.RestartedAtS {
			continue
		}
		if base < 0 {
			base = hs.KvpilotHits
			continue
		}
		if hs.KvpilotHits > base {
			f.HitsResumedAfterS = round(hs.T - f.RestartedAtS)
			return
		}
	}
}
