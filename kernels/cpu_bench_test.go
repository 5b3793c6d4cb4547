package kernels

import (
	"testing"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// BenchmarkRotate rotates every slot of a Llama-3-8B-like GQA arena and a
// DeepSeek-like MLA arena (8 layers, 2048 slots) with each kernel set.
// Bytes are RoPE-slice bytes, as kvpilot bench rotate counts them.
func BenchmarkRotate(b *testing.B) {
	models := []struct {
		name string
		spec func(DType) LayoutSpec
	}{
		{"gqa", func(dt DType) LayoutSpec { return GQASpec(dt, 2048, 8, 8, 128, cfgLlama3) }},
		{"mla", func(dt DType) LayoutSpec {
			return MLASpec(dt, 2048, 8, 512, rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved})
		}},
	}
	for _, m := range models {
		for _, dt := range dtypes {
			l, err := NewLayout(m.spec(dt))
			if err != nil {
				b.Fatal(err)
			}
			a := Arena{Layout: l, Host: alignedBytes(int(l.ArenaBytes()))}
			slots, plus, minus := make([]int, l.Slots()), make([]int, l.Slots()), make([]int, l.Slots())
			for i := range slots {
				slots[i], plus[i], minus[i] = i, 7, -7
			}
			for _, set := range kernelSets() {
				b.Run(m.name+"/"+dt.String()+"/"+set, func(b *testing.B) {
					setSIMD(b, set)
					e := NewCPU()
					b.SetBytes(int64(l.RopeBytesPerSlot()) * int64(l.Slots()))
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						d := plus
						if i%2 == 1 {
							d = minus
						}
						if err := e.Rotate(a, slots, d); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// TestRotateAllocatesNothing: after a warm-up call, Rotate (validation,
// tables, fan-out to helpers) allocates nothing, with either kernel set.
func TestRotateAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	forEachKernelSet(t, func(t *testing.T) {
		for _, spec := range []LayoutSpec{GQASpec(BF16, 512, 2, 8, 128, cfgLlama3), MLASpec(F16, 512, 2, 512, cfgDeepSeek)} {
			l, err := NewLayout(spec)
			if err != nil {
				t.Fatal(err)
			}
			a := Arena{Layout: l, Host: alignedBytes(int(l.ArenaBytes()))}
			slots, deltas := make([]int, l.Slots()), make([]int, l.Slots())
			for i := range slots {
				slots[i], deltas[i] = i, i%3-1 // three distinct Δ, one of them 0
			}
			e := &CPU{workers: 2}
			allocs := testing.AllocsPerRun(50, func() {
				if err := e.Rotate(a, slots, deltas); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v: %v allocations per Rotate call", l.DType(), allocs)
			}
		}
	})
}
