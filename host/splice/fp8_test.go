package splice

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// fp8 pages (vLLM's fp8 KV caches) get a splice device: the kernels
// rotate them as stored (kernels/fp8.go), so a splice is no longer refused
// for its dtype.
func TestFP8PagesAreRotatedByTheKernels(t *testing.T) {
	for _, tc := range []struct {
		dt   layout.DType
		want kernels.DType
	}{{layout.FP8E4M3, kernels.E4M3}, {layout.FP8E5M2, kernels.E5M2}} {
		lay := layout.MHA("fp8", rigPage, tc.dt, 2, 2, 8, 8, layout.HalfSplit)
		arena, err := memfd.New(memfd.Options{Tier: tier.Device, Layout: &lay, Pages: 8})
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDevice(arena, Memory{Host: arena.Bytes()}, rope.Config{Base: 10000, Dim: 8, Pairing: rope.HalfSplit}, kernels.NewCPU())
		if err != nil {
			t.Fatalf("%v: %v", tc.dt, err)
		}
		if got := d.kl.DType(); got != tc.want {
			t.Errorf("%v pages: the kernels' dtype is %v, want %v", tc.dt, got, tc.want)
		}
		if err := arena.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
