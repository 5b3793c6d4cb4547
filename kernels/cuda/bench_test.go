package cuda

import (
	"testing"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// The kernels' bandwidth against the device's own copy of the same bytes
// (cuMemcpyDtoD), on one GPU: each benchmark reports MB/s of the bytes it
// moves, so MB/s over BenchmarkDeviceCopy's is the kernel's share of what
// the device copies. make gpu-check runs them (kernels/cuda/gpu-check.sh).
// They skip without a CUDA driver.

// benchLayout is a Llama-3-8B-like GQA arena of 256 MiB in bf16: 8 layers
// of K and V, 8 KV heads of 128, 8192 token slots.
func benchLayout(b *testing.B) *kernels.Layout {
	l, err := kernels.NewLayout(kernels.GQASpec(kernels.BF16, 8192, 8, 8, 128,
		rope.Config{Base: 500000, Dim: 128, Pairing: rope.HalfSplit}))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

type benchArenas struct {
	e        *Engine
	l        *kernels.Layout
	src, dst cudadrv.DevicePtr
	slots    []int
}

func openBench(b *testing.B) *benchArenas {
	b.Helper()
	e := openOrSkip(b)
	ctx := e.ctx
	l := benchLayout(b)
	n := int(l.ArenaBytes())
	src, err := ctx.MemAlloc(n)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := ctx.MemAlloc(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = ctx.MemFree(src)
		_ = ctx.MemFree(dst)
	})
	// Small finite bf16 values (0x3c3c): rotation never meets NaNs.
	if err := ctx.MemsetD8(src, 0x3c, n); err != nil {
		b.Fatal(err)
	}
	if err := ctx.MemsetD8(dst, 0x3c, n); err != nil {
		b.Fatal(err)
	}
	slots := make([]int, l.Slots())
	for i := range slots {
		slots[i] = i
	}
	return &benchArenas{e: e, l: l, src: src, dst: dst, slots: slots}
}

// loop times op over b.Loop after one untimed call: the first launch of a
// kernel loads it (the driver loads functions lazily), which a short
// -benchtime would otherwise count in every op's mean.
func loop(b *testing.B, bytes int64, op func() error) {
	b.Helper()
	if err := op(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(bytes)
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeviceCopy is the baseline: the whole arena, device to device.
func BenchmarkDeviceCopy(b *testing.B) {
	a := openBench(b)
	loop(b, a.l.ArenaBytes(), func() error {
		return a.e.ctx.CopyDtoD(a.dst, a.src, int(a.l.ArenaBytes()))
	})
}

// BenchmarkKernelCopy: the move kernel copies every row between arenas.
func BenchmarkKernelCopy(b *testing.B) {
	a := openBench(b)
	loop(b, a.l.ArenaBytes(), func() error {
		return a.e.Copy(kernels.Arena{Layout: a.l, Device: a.dst}, a.slots,
			kernels.Arena{Layout: a.l, Device: a.src}, a.slots)
	})
}

// BenchmarkKernelGatherRotateScatter: every row moved within the arena
// (slots shifted by one page) while its keys are re-rotated.
func BenchmarkKernelGatherRotateScatter(b *testing.B) {
	a := openBench(b)
	n := len(a.slots) / 2
	src, dst, deltas := a.slots[n:], a.slots[:n], make([]int, n)
	for i := range deltas {
		deltas[i] = -n
	}
	loop(b, a.l.ArenaBytes()/2, func() error {
		return a.e.GatherRotateScatter(kernels.Arena{Layout: a.l, Device: a.src}, src, dst, deltas)
	})
}

// BenchmarkKernelRotate: every key row re-rotated in place (K is half the
// arena; the kernel reads and writes its RoPE slice).
func BenchmarkKernelRotate(b *testing.B) {
	a := openBench(b)
	deltas := make([]int, len(a.slots))
	for i := range deltas {
		deltas[i] = 1 + i%64
	}
	loop(b, a.l.ArenaBytes()/2, func() error {
		return a.e.Rotate(kernels.Arena{Layout: a.l, Device: a.src}, a.slots, deltas)
	})
}

// BenchmarkKernelRotateAlone is BenchmarkKernelRotate's kernel without the
// host's part of the call (checking, staging and uploading the arguments,
// done once here): the share of the copy the kernel itself reaches, which
// bounds what the whole call can.
func BenchmarkKernelRotateAlone(b *testing.B) {
	a := openBench(b)
	deltas := make([]int, len(a.slots))
	for i := range deltas {
		deltas[i] = 1 + i%64
	}
	launch, err := a.e.stageRotate(kernels.Arena{Layout: a.l, Device: a.src}, a.slots, deltas)
	if err != nil {
		b.Fatal(err)
	}
	loop(b, a.l.ArenaBytes()/2, launch)
}
