package cuda

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"regexp"
	"testing"
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// TestPTXHasEntries needs no GPU: the embedded PTX must define every entry
// point New looks up, for the sm_80+ target the build documents.
func TestPTXHasEntries(t *testing.T) {
	for _, name := range []string{"kv_rotate_f32", "kv_rotate_bf16", "kv_rotate_f16", "kv_move_f32", "kv_move_bf16", "kv_move_f16"} {
		if !regexp.MustCompile(`\.visible \.entry ` + name + `\(`).Match(PTX()) {
			t.Errorf("embedded PTX lacks entry %s", name)
		}
	}
	if !bytes.Contains(PTX(), []byte(".target sm_80")) {
		t.Error("embedded PTX does not target sm_80")
	}
	if bytes.Contains(PTX(), []byte("fma.rn.f32")) {
		t.Error("PTX contains fused multiply-adds: results would differ from the CPU engine")
	}
}

func openOrSkip(t testing.TB) *Engine {
	t.Helper()
	d, err := cudadrv.Load()
	if err != nil {
		if !errors.Is(err, cudadrv.ErrNoDriver) {
			t.Fatalf("Load: %v", err)
		}
		t.Skipf("no usable CUDA driver (%v): run it on a machine with an NVIDIA GPU and its driver (libcuda.so.1), e.g. make gpu-check", err)
	}
	ctx, err := d.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(ctx)
	if err != nil {
		_ = ctx.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(); _ = ctx.Close() })
	return e
}

var specs = map[string]func(dt kernels.DType) kernels.LayoutSpec{
	"gqa-llama3": func(dt kernels.DType) kernels.LayoutSpec {
		return kernels.GQASpec(dt, 300, 3, 8, 128, rope.Config{Base: 500000, Dim: 128, Pairing: rope.HalfSplit,
			Scaling: rope.Scaling{Type: rope.ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 8192}})
	},
	"gqa-partial": func(dt kernels.DType) kernels.LayoutSpec {
		return kernels.GQASpec(dt, 300, 2, 2, 128, rope.Config{Base: 10000, Dim: 32, Pairing: rope.HalfSplit})
	},
	// Slices not 16-byte aligned (rope dim 12 of 40): the element path.
	"gqa-unaligned": func(dt kernels.DType) kernels.LayoutSpec {
		return kernels.GQASpec(dt, 300, 2, 3, 40, rope.Config{Base: 10000, Dim: 12, Pairing: rope.HalfSplit})
	},
	"mla-deepseek": func(dt kernels.DType) kernels.LayoutSpec {
		return kernels.MLASpec(dt, 300, 4, 512, rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved,
			Scaling: rope.Scaling{Type: rope.ScalingYaRN, Factor: 40, OriginalMaxPosition: 4096, MScale: 0.707, MScaleAllDim: 0.707}})
	},
}

// hostArena fills an arena with finite values of its dtype (NaN payloads
// are the one thing CPUs and GPUs legitimately disagree on).
func hostArena(t *testing.T, l *kernels.Layout, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := make([]uint64, (l.ArenaBytes()+7)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), l.ArenaBytes())
	for i := 0; i+4 <= len(mem); i += 4 {
		x := float32(rng.NormFloat64())
		switch l.DType() {
		case kernels.F32:
			*(*float32)(unsafe.Pointer(&mem[i])) = x
		case kernels.BF16:
			*(*uint16)(unsafe.Pointer(&mem[i])) = kernels.F32ToBF16(x)
			*(*uint16)(unsafe.Pointer(&mem[i+2])) = kernels.F32ToBF16(-x / 3)
		case kernels.F16:
			*(*uint16)(unsafe.Pointer(&mem[i])) = kernels.F32ToF16(x)
			*(*uint16)(unsafe.Pointer(&mem[i+2])) = kernels.F32ToF16(-x / 3)
		case kernels.E4M3, kernels.E5M2:
			// Spread over the format's range, saturating values included.
			narrow := kernels.F32ToE4M3
			if l.DType() == kernels.E5M2 {
				narrow = kernels.F32ToE5M2
			}
			for j, v := range []float32{x, -x / 3, x * 200, x / 64} {
				mem[i+j] = narrow(v)
			}
		}
	}
	return mem
}

// TestMatchesCPU runs every kernel on the GPU and on the CPU from the same
// bytes and requires identical bytes back.
func TestMatchesCPU(t *testing.T) {
	e := openOrSkip(t)
	cpu := kernels.NewCPU()
	for name, spec := range specs {
		for _, dt := range []kernels.DType{kernels.F32, kernels.BF16, kernels.F16, kernels.E4M3, kernels.E5M2} {
			t.Run(name+"/"+dt.String(), func(t *testing.T) {
				l, err := kernels.NewLayout(spec(dt))
				if err != nil {
					t.Fatal(err)
				}
				host := kernels.Arena{Layout: l, Host: hostArena(t, l, 7)}
				dev, err := e.ctx.MemAlloc(int(l.ArenaBytes()))
				if err != nil {
					t.Fatal(err)
				}
				defer e.ctx.MemFree(dev)
				if err := e.ctx.CopyHtoD(dev, host.Host); err != nil {
					t.Fatal(err)
				}
				da := kernels.Arena{Layout: l, Device: dev}
				compare := func(step string) {
					t.Helper()
					got := make([]byte, len(host.Host))
					if err := e.ctx.CopyDtoH(got, dev); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, host.Host) {
						t.Fatalf("%s: GPU bytes differ from CPU bytes", step)
					}
				}
				rng := rand.New(rand.NewPCG(2, 2))
				var slots, deltas []int
				for s := 0; s < l.Slots(); s += 3 {
					slots = append(slots, s)
					deltas = append(deltas, rng.IntN(256<<10)-(128<<10))
				}
				deltas[0] = 0
				for _, eng := range []kernels.Engine{cpu, e} {
					a := host
					if eng == e {
						a = da
					}
					if err := eng.Rotate(a, slots, deltas); err != nil {
						t.Fatal(err)
					}
				}
				compare("rotate")
				var src, dst, shift []int
				for s := 10; s < l.Slots(); s++ {
					src, dst, shift = append(src, s), append(dst, s-7), append(shift, -7)
				}
				for _, eng := range []kernels.Engine{cpu, e} {
					a := host
					if eng == e {
						a = da
					}
					if err := eng.GatherRotateScatter(a, src, dst, shift); err != nil { // overlapping: staged
						t.Fatal(err)
					}
					if err := eng.GatherRotateScatter(a, []int{1, 2, 3}, []int{200, 201, 202}, []int{5, 5, 99999}); err != nil {
						t.Fatal(err)
					}
				}
				compare("gather-rotate-scatter")
				// Device -> pinned host copy, as the mover's write-back does.
				pinned, err := e.ctx.MemAllocHost(int(l.ArenaBytes()))
				if err != nil {
					t.Fatal(err)
				}
				defer e.ctx.MemFreeHost(pinned)
				// Page-locked memory comes back from the driver as it was
				// last used (the engine's own argument memory among
				// others): both sides start from the same bytes, and rows
				// not copied must keep them.
				want := hostArena(t, l, 9)
				copy(pinned, want)
				if err := e.Copy(kernels.Arena{Layout: l, Host: pinned}, []int{0, 5, 299}, da, []int{299, 5, 0}); err != nil {
					t.Fatal(err)
				}
				if err := cpu.Copy(kernels.Arena{Layout: l, Host: want}, []int{0, 5, 299}, host, []int{299, 5, 0}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(want, pinned) {
					t.Fatal("device -> pinned host copy differs from the CPU copy")
				}
			})
		}
	}
}

func TestRejectsHostArenaForRotate(t *testing.T) {
	e := openOrSkip(t)
	l, _ := kernels.NewLayout(specs["gqa-partial"](kernels.F32))
	if err := e.Rotate(kernels.Arena{Layout: l, Host: make([]byte, l.ArenaBytes())}, []int{0}, []int{1}); !errors.Is(err, kernels.ErrMemory) {
		t.Fatalf("err = %v", err)
	}
	if err := e.Copy(kernels.Arena{Layout: l, Device: 1 << 20}, []int{0}, kernels.Arena{Layout: l, Host: make([]byte, l.ArenaBytes())}, []int{0}); !errors.Is(err, kernels.ErrMemory) {
		t.Fatalf("unpinned host arena: err = %v", err)
	}
}
