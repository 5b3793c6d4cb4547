package mover

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/tier"
)

// The mover's hooks feed the host's transfer metrics by tier pair: the
// write-through's copies (bytes and time, device to host) and the failed
// copies of a pause to a broken disk, read back from the registry.
func TestTransferMetricsByTierPair(t *testing.T) {
	h := newHost(t, hostConfig{dataDir: t.TempDir()})
	m := metrics.New()
	var err error
	h.mv, err = New(Options{Index: h.g, Pools: brokenDisk{h.pools}, Workers: 4, Retries: -1,
		OnFailure: func(from, to tier.Tier) { m.CountTransferFailure(from.String(), to.String()) },
		OnCopy: func(from, to tier.Tier, n int64, took time.Duration) {
			m.ObserveCopy(from.String(), to.String(), n, took)
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := h.commit("acme", 0, 4)
	ctx := context.Background()
	if r := h.mv.Step(ctx); r.Copied == 0 {
		t.Fatalf("the write-through copied nothing: %+v", r)
	}
	if _, _, err := h.mv.Pause(ctx, s.target(), "L", tier.Disk, time.Hour); err == nil {
		t.Fatal("a pause to a broken disk settled")
	}
	got := gathered(t, m)
	pageBytes := float64(testLayout.PageBytes())
	if b := got["kvpilot_transfer_bytes_total/device/host"]; b != 4*pageBytes {
		t.Errorf("kvpilot_transfer_bytes_total{device,host} = %v, want %v", b, 4*pageBytes)
	}
	if n := got["kvpilot_transfer_duration_seconds/device/host"]; n != 4 {
		t.Errorf("%v device->host copies timed, want 4", n)
	}
	if got["kvpilot_transfer_failures_total/device/disk"]+got["kvpilot_transfer_failures_total/host/disk"] == 0 {
		t.Errorf("no failed copy to the broken disk counted: %v", got)
	}
	if b := got["kvpilot_transfer_bytes_total/device/disk"] + got["kvpilot_transfer_bytes_total/host/disk"]; b != 0 {
		t.Errorf("failed copies counted %v bytes", b)
	}
}

// gathered reads the registry: a counter's value or a histogram's sample
// count, keyed name/from/to.
func gathered(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range s.GetLabel() {
				key += "/" + l.GetValue()
			}
			switch {
			case s.GetCounter() != nil:
				out[key] = s.GetCounter().GetValue()
			case s.GetHistogram() != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
