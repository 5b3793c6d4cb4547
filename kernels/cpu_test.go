package kernels

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// testEngine forces chunking across several goroutines even on a small
// machine, so the parallel split is exercised.
func testEngine() *CPU { return &CPU{workers: 4} }

// TestRotateMatchesRoPE is the core property: rotating RoPE(k, p) by
// Δ gives RoPE(k, p+Δ). fp32: within 1e-5 of the pair's norm. bf16/fp16:
// within one storage ulp of the exact rotation of the stored input (the
// kernel's own error); the distance to RoPE(k, p+Δ) beyond that is only the
// input's storage rounding, rotated, which the 3-ulp check bounds.
func TestRotateMatchesRoPE(t *testing.T) { forEachKernelSet(t, testRotateMatchesRoPE) }

func testRotateMatchesRoPE(t *testing.T) {
	for _, lc := range layoutCases {
		for _, dt := range dtypes {
			t.Run(lc.name+"/"+dt.String(), func(t *testing.T) {
				f := newFixture(t, lc.spec(dt), 42)
				l := f.a.Layout
				cfg := l.Spec().Rope
				rng := rand.New(rand.NewPCG(3, uint64(dt)))
				// Every other slot, with Δ of both signs up to ±128K; slot 0 gets Δ=0.
				var slots, deltas []int
				for s := 0; s < l.Slots(); s += 2 {
					slots = append(slots, s)
					d := rng.IntN(128<<10) - f.pos[s]
					if s == 0 {
						d = 0
					}
					deltas = append(deltas, d)
				}
				before := bytes.Clone(f.a.Host)
				inputs := map[[3]int][]float64{}
				for _, b := range l.ropeBuf {
					for _, s := range slots {
						for h := 0; h < l.Buffer(b).Rope.Heads; h++ {
							inputs[[3]int{b, s, h}] = f.load(b, s, h)
						}
					}
				}
				if err := testEngine().Rotate(f.a, slots, deltas); err != nil {
					t.Fatal(err)
				}
				checkOutsideUntouched(t, f, before, slots)
				for i, s := range slots {
					for _, b := range l.ropeBuf {
						for h := 0; h < l.Buffer(b).Rope.Heads; h++ {
							key := [3]int{b, s, h}
							got := f.load(b, s, h)
							want := append([]float64(nil), f.keys[key]...)
							_ = f.rot.Apply(want, f.pos[s]+deltas[i])
							exact := append([]float64(nil), inputs[key]...)
							_ = f.rot.Rotate(exact, deltas[i])
							for e := range got {
								norm := pairNorm(want, cfg, e)
								if dt == F32 {
									if d := math.Abs(got[e] - want[e]); d > 1e-5*norm {
										t.Fatalf("buf %d slot %d head %d elem %d Δ=%d: got %v want %v (|err| %.3g > 1e-5·%.3g)", b, s, h, e, deltas[i], got[e], want[e], d, norm)
									}
									continue
								}
								if d, u := math.Abs(got[e]-exact[e]), storageULP(dt, max(math.Abs(exact[e]), pairNorm(exact, cfg, e)/256)); d > u {
									t.Fatalf("buf %d slot %d head %d elem %d Δ=%d: got %v, exact rotation %v: %.3g > 1 ulp (%.3g)", b, s, h, e, deltas[i], got[e], exact[e], d, u)
								}
								if d, u := math.Abs(got[e]-want[e]), 3*storageULP(dt, norm); d > u {
									t.Fatalf("buf %d slot %d head %d elem %d Δ=%d: got %v, RoPE(k,p+Δ) %v: %.3g > 3 ulp of the pair", b, s, h, e, deltas[i], got[e], want[e], d)
								}
							}
						}
					}
				}
			})
		}
	}
}

// checkOutsideUntouched: only the RoPE slices of rotated slots with Δ≠0 may change.
func checkOutsideUntouched(t *testing.T, f *kvFixture, before []byte, slots []int) {
	t.Helper()
	mask := f.ropeMask(slots)
	for i := range before {
		if !mask[i] && before[i] != f.a.Host[i] {
			t.Fatalf("byte %d outside the rotated RoPE slices changed: %#x -> %#x", i, before[i], f.a.Host[i])
		}
	}
	// Slot 0 was rotated by Δ=0 in the callers: bit-identical everywhere.
	for _, b := range f.a.Layout.ropeBuf {
		buf := f.a.Layout.Buffer(b)
		lo := buf.Offset
		if !bytes.Equal(before[lo:lo+int64(buf.RowBytes)], f.a.Host[lo:lo+int64(buf.RowBytes)]) {
			t.Fatalf("buffer %d slot 0 changed under Δ=0", b)
		}
	}
}

// TestRotateComposition: rotating by Δ1 then Δ2 equals rotating by Δ1+Δ2.
func TestRotateComposition(t *testing.T) { forEachKernelSet(t, testRotateComposition) }

func testRotateComposition(t *testing.T) {
	for _, lc := range layoutCases {
		t.Run(lc.name, func(t *testing.T) {
			one := newFixture(t, lc.spec(F32), 5)
			two := newFixture(t, lc.spec(F32), 5)
			n := one.a.Layout.Slots()
			rng := rand.New(rand.NewPCG(9, 9))
			slots := make([]int, n)
			d1, d2, sum := make([]int, n), make([]int, n), make([]int, n)
			for s := range slots {
				slots[s] = s
				d1[s] = rng.IntN(200001) - 100000
				d2[s] = rng.IntN(200001) - 100000
				sum[s] = d1[s] + d2[s]
			}
			e := testEngine()
			if err := e.Rotate(one.a, slots, d1); err != nil {
				t.Fatal(err)
			}
			if err := e.Rotate(one.a, slots, d2); err != nil {
				t.Fatal(err)
			}
			if err := e.Rotate(two.a, slots, sum); err != nil {
				t.Fatal(err)
			}
			cfg := one.a.Layout.Spec().Rope
			for _, b := range one.a.Layout.ropeBuf {
				for s := 0; s < n; s++ {
					for h := 0; h < one.a.Layout.Buffer(b).Rope.Heads; h++ {
						x, y := one.load(b, s, h), two.load(b, s, h)
						for i := range x {
							if d := math.Abs(x[i] - y[i]); d > 1e-5*pairNorm(y, cfg, i) {
								t.Fatalf("buf %d slot %d head %d elem %d: two steps %v, one step %v", b, s, h, i, x[i], y[i])
							}
						}
					}
				}
			}
		})
	}
}

// TestGatherRotateScatterEqualsGatherThenRotate, disjoint and overlapping.
func TestGatherRotateScatterEqualsGatherThenRotate(t *testing.T) {
	forEachKernelSet(t, testGatherRotateScatterEqualsGatherThenRotate)
}

func testGatherRotateScatterEqualsGatherThenRotate(t *testing.T) {
	for _, lc := range layoutCases {
		for _, dt := range dtypes {
			t.Run(lc.name+"/"+dt.String(), func(t *testing.T) {
				n := 48
				// Disjoint: slots 0..15 -> 30..45, one source read twice.
				var src, dst, deltas []int
				for i := 0; i < 16; i++ {
					src = append(src, i)
					dst = append(dst, 30+i)
					deltas = append(deltas, -7+i*1000)
				}
				src[15] = 3
				checkGRS(t, lc.spec(dt), src, dst, deltas)
				// Overlapping: a splice shift of every slot from 5 on, left by 3
				// (dst 2..44 reads 5..47), with one Δ, as the executor issues it.
				src, dst, deltas = nil, nil, nil
				for s := 5; s < n; s++ {
					src = append(src, s)
					dst = append(dst, s-3)
					deltas = append(deltas, -3)
				}
				checkGRS(t, lc.spec(dt), src, dst, deltas)
				// A cycle: 0->1->2->0.
				checkGRS(t, lc.spec(dt), []int{0, 1, 2}, []int{1, 2, 0}, []int{5, -5, 40000})
			})
		}
	}
}

func checkGRS(t *testing.T, spec LayoutSpec, src, dst, deltas []int) {
	t.Helper()
	f := newFixture(t, spec, 11)
	orig := bytes.Clone(f.a.Host)
	e := testEngine()
	if err := e.GatherRotateScatter(f.a, src, dst, deltas); err != nil {
		t.Fatal(err)
	}
	// Reference: gather every source row from the original bytes into a
	// separate arena, then scatter by Copy, then Rotate the destinations.
	l := f.a.Layout
	want := Arena{Layout: l, Host: alignedBytes(len(orig))}
	copy(want.Host, orig)
	snap := Arena{Layout: l, Host: alignedBytes(len(orig))}
	copy(snap.Host, orig)
	if err := e.Copy(want, dst, snap, src); err != nil {
		t.Fatal(err)
	}
	if err := e.Rotate(want, dst, deltas); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.a.Host, want.Host) {
		t.Fatalf("gather-rotate-scatter differs from gather then rotate (src %v dst %v)", src, dst)
	}
}

func TestCopyBetweenArenas(t *testing.T) {
	hostSpec := GQASpec(BF16, 64, 2, 2, 128, cfgQwen)
	devSpec := GQASpec(BF16, 16, 2, 2, 128, cfgQwen)
	src := newFixture(t, hostSpec, 1)
	dst := newFixture(t, devSpec, 2)
	before := bytes.Clone(dst.a.Host)
	srcSlots, dstSlots := []int{63, 0, 17}, []int{1, 2, 15}
	if err := testEngine().Copy(dst.a, dstSlots, src.a, srcSlots); err != nil {
		t.Fatal(err)
	}
	touched := map[int]int{1: 63, 2: 0, 15: 17}
	for b := 0; b < dst.a.Layout.NumBuffers(); b++ {
		db, sb := dst.a.Layout.Buffer(b), src.a.Layout.Buffer(b)
		for s := 0; s < 16; s++ {
			got := row(dst.a.Host, &db, s)
			want := row(before, &db, s)
			if from, ok := touched[s]; ok {
				want = row(src.a.Host, &sb, from)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("buffer %d slot %d wrong after copy", b, s)
			}
		}
	}
}

func TestBadInputsAreErrors(t *testing.T) {
	f := newFixture(t, GQASpec(F32, 8, 1, 2, 128, cfgQwen), 1)
	other := newFixture(t, MLASpec(F32, 8, 1, 512, cfgDeepSeek), 1)
	e := testEngine()
	before := bytes.Clone(f.a.Host)
	big := alignedBytes(len(f.a.Host) + 4)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"slot out of range", e.Rotate(f.a, []int{8}, []int{1}), ErrArgs},
		{"negative slot", e.Rotate(f.a, []int{-1}, []int{1}), ErrArgs},
		{"length mismatch", e.Rotate(f.a, []int{1, 2}, []int{1}), ErrArgs},
		{"duplicate slot", e.Rotate(f.a, []int{1, 1}, []int{1, 2}), ErrArgs},
		{"delta too large", e.Rotate(f.a, []int{1}, []int{1 << 40}), ErrArgs},
		{"no layout", e.Rotate(Arena{Host: f.a.Host}, nil, nil), ErrLayout},
		{"short arena", e.Rotate(Arena{Layout: f.a.Layout, Host: f.a.Host[:100]}, nil, nil), ErrLayout},
		{"misaligned arena", e.Rotate(Arena{Layout: f.a.Layout, Host: alignedBytes(len(f.a.Host) + 8)[1:]}, nil, nil), ErrLayout},
		{"device arena on cpu", e.Rotate(Arena{Layout: f.a.Layout, Device: 0x1000}, nil, nil), ErrMemory},
		{"grs length mismatch", e.GatherRotateScatter(f.a, []int{1}, []int{2, 3}, []int{1}), ErrArgs},
		{"grs deltas mismatch", e.GatherRotateScatter(f.a, []int{1}, []int{2}, nil), ErrArgs},
		{"grs duplicate dst", e.GatherRotateScatter(f.a, []int{1, 2}, []int{3, 3}, []int{1, 1}), ErrArgs},
		{"grs dst out of range", e.GatherRotateScatter(f.a, []int{1}, []int{99}, []int{1}), ErrArgs},
		{"copy incompatible layouts", e.Copy(other.a, []int{0}, f.a, []int{0}), ErrLayout},
		{"copy overlapping arenas", e.Copy(Arena{Layout: f.a.Layout, Host: big[:len(f.a.Host)]}, []int{0}, Arena{Layout: f.a.Layout, Host: big[4:]}, []int{1}), ErrArgs},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.want)
		}
	}
	if !bytes.Equal(before, f.a.Host) {
		t.Fatal("a rejected call modified the arena")
	}
}

func TestNewLayoutRejects(t *testing.T) {
	good := GQASpec(F32, 8, 2, 2, 128, cfgQwen)
	cases := map[string]func(s *LayoutSpec){
		"no dtype":         func(s *LayoutSpec) { s.DType = 0 },
		"zero slots":       func(s *LayoutSpec) { s.Slots = 0 },
		"no buffers":       func(s *LayoutSpec) { s.Buffers = nil },
		"odd rope dim":     func(s *LayoutSpec) { s.Rope.Dim = 63 },
		"overlap":          func(s *LayoutSpec) { s.Buffers[1].Offset = 4 },
		"misaligned row":   func(s *LayoutSpec) { s.Buffers[1].RowBytes = 6 },
		"slice past row":   func(s *LayoutSpec) { s.Buffers[0].Rope = &RopeSlice{Offset: 600, Heads: 2, HeadStride: 512} },
		"heads overlap":    func(s *LayoutSpec) { s.Buffers[0].Rope = &RopeSlice{Heads: 2, HeadStride: 4} },
		"negative offset":  func(s *LayoutSpec) { s.Buffers[0].Offset = -4 },
		"zero heads":       func(s *LayoutSpec) { s.Buffers[0].Rope = &RopeSlice{Heads: 0, HeadStride: 512} },
		"bad rope scaling": func(s *LayoutSpec) { s.Rope.Scaling.Type = 7 },
	}
	for name, mutate := range cases {
		s := good
		s.Buffers = append([]BufferSpec(nil), good.Buffers...)
		mutate(&s)
		if _, err := NewLayout(s); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, ErrLayout) && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v wraps neither ErrLayout nor ErrConfig", name, err)
		}
	}
	l, err := NewLayout(good)
	if err != nil {
		t.Fatal(err)
	}
	if l.RopeBytesPerSlot() != 2*2*128*4 || l.SlotBytes() != 2*2*2*128*4 {
		t.Fatalf("rope bytes %d slot bytes %d", l.RopeBytesPerSlot(), l.SlotBytes())
	}
}

func row(mem []byte, b *BufferSpec, slot int) []byte {
	off := b.Offset + int64(slot)*int64(b.RowBytes)
	return mem[off : off+int64(b.RowBytes)]
}
