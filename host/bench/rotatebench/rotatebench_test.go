package rotatebench

import (
	"context"
	"errors"
	"testing"

	"github.com/kvpilot/kvpilot/kernels"
)

func TestRunSmallCPU(t *testing.T) {
	for _, model := range []string{"gqa", "mla"} {
		r, err := Run(context.Background(), Options{Model: model, Slots: 64, Layers: 2, Iters: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.Scenario != "rotate" || r.Device != "cpu" || !(r.GBps > 0) || !(r.BaselineGBps > 0) || r.Ratio != r.GBps/r.BaselineGBps ||
			r.Targets.RatioMin != RatioMinCPU || r.Targets.Met != (r.Ratio >= RatioMinCPU) {
			t.Fatalf("%s: implausible result %+v", model, r)
		}
	}
	if _, err := Run(context.Background(), Options{Model: "mamba"}); !errors.Is(err, ErrOptions) {
		t.Fatalf("bad model: %v", err)
	}
	if _, err := Run(context.Background(), Options{Device: "tpu", Slots: 8, Layers: 1}); !errors.Is(err, ErrOptions) {
		t.Fatalf("bad device: %v", err)
	}
}

func BenchmarkRotateCPU(b *testing.B) {
	for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.F16} {
		for _, model := range []string{"gqa", "mla"} {
			b.Run(model+"/"+dt.String(), func(b *testing.B) {
				o := Options{Model: model, DType: dt, Slots: 2048, Layers: 4}
				_ = o.defaults()
				spec, _ := o.Spec()
				l, err := kernels.NewLayout(spec)
				if err != nil {
					b.Fatal(err)
				}
				slots, deltas := make([]int, l.Slots()), make([]int, l.Slots())
				for i := range slots {
					slots[i], deltas[i] = i, 7
				}
				a := kernels.Arena{Layout: l, Host: aligned(int(l.ArenaBytes()))}
				fill(a.Host, dt)
				e := kernels.NewCPU()
				b.SetBytes(int64(l.RopeBytesPerSlot()) * int64(l.Slots()))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					deltas[0] = -deltas[0]
					if err := e.Rotate(a, slots, deltas); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkMemcpyBaseline(b *testing.B) {
	n := 2048 * 4 * 8 * 128 * 2
	src, dst := aligned(n), aligned(n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		copy(dst, src)
	}
}
