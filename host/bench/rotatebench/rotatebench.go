// Package rotatebench measures RoPE Δ-rotation throughput for `kvpilot
// bench rotate`: bytes of RoPE slice rotated per second,
// against a copy of the same number of bytes in the same run (memcpy on the
// CPU with the same number of goroutines, a device-to-device copy on a GPU).
// Targets: ratio >= 0.5 on CPU, >= 0.8 on GPU: a splice re-rotates only
// the RoPE slice of the pages after the edit, so rotating them at half a
// copy's speed (a GPU's copy engines set a higher bar) keeps a splice far
// cheaper than prefilling those pages again.
//
// Bytes are the RoPE-slice bytes rotated, counted once (not read plus
// write), and the copy moves exactly that many bytes, contiguous. For MLA
// that favours the copy: its 2×4 MiB (bf16) stay in the last-level cache
// between repetitions and stream through few pages, while the rotated k_pe
// slices (128 of every 1152 bytes) are spread over a 37 MiB arena, two
// cache lines per row, a new page every few rows. On the CPU the JSON's params.kernels says
// which kernels ran (avx2, or generic with KVPILOT_CPU_KERNELS=generic).
package rotatebench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cuda"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// Options choose the workload. Zero values take the defaults.
type Options struct {
	Device string // "cpu" (default), "cuda", or "auto" (cuda when a GPU is present)
	Model  string // "gqa" (Llama-3-8B-like K/V, default) or "mla" (DeepSeek [kv_c 512 | k_pe 64])
	DType  kernels.DType
	Slots  int // token slots (default 4096)
	Layers int // default 8
	Iters  int // measured repetitions of each arm (default 10)
}

// Result is the scenario's JSON object.
type Result struct {
	Scenario     string         `json:"scenario"`
	Device       string         `json:"device"`
	GBps         float64        `json:"gbps"`
	BaselineGBps float64        `json:"baseline_gbps"`
	Ratio        float64        `json:"ratio"`
	Targets      Targets        `json:"targets"`
	Params       map[string]any `json:"params"`
}

// Targets is the ratio the device must reach, and whether it did.
type Targets struct {
	RatioMin float64 `json:"ratio_min"`
	Met      bool    `json:"met"`
}

// Minimum ratios of rotation to copy throughput, by device.
const (
	RatioMinCPU  = 0.5
	RatioMinCUDA = 0.8
)

// ErrOptions is wrapped by invalid options.
var ErrOptions = errors.New("rotatebench: invalid options")

func (o *Options) defaults() error {
	o.Device = cmp.Or(o.Device, "cpu")
	o.Model = cmp.Or(o.Model, "gqa")
	o.DType = cmp.Or(o.DType, kernels.BF16)
	o.Slots = cmp.Or(o.Slots, 4096)
	o.Layers = cmp.Or(o.Layers, 8)
	o.Iters = cmp.Or(o.Iters, 10)
	if o.Slots < 0 || o.Layers < 0 || o.Iters < 0 {
		return fmt.Errorf("slots, layers and iters must be positive: %w", ErrOptions)
	}
	return nil
}

// Spec is the layout the benchmark rotates.
func (o Options) Spec() (kernels.LayoutSpec, error) {
	switch o.Model {
	case "gqa":
		return kernels.GQASpec(o.DType, o.Slots, o.Layers, 8, 128, rope.Config{Base: 500000, Dim: 128, Pairing: rope.HalfSplit,
			Scaling: rope.Scaling{Type: rope.ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 8192}}), nil
	case "mla":
		return kernels.MLASpec(o.DType, o.Slots, o.Layers, 512, rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved,
			Scaling: rope.Scaling{Type: rope.ScalingYaRN, Factor: 40, OriginalMaxPosition: 4096, MScale: 0.707, MScaleAllDim: 0.707}}), nil
	}
	return kernels.LayoutSpec{}, fmt.Errorf("model %q: want gqa or mla: %w", o.Model, ErrOptions)
}

// Run measures both arms, alternating them so they share machine conditions,
// and reports the median rate of each.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	spec, err := o.Spec()
	if err != nil {
		return Result{}, err
	}
	l, err := kernels.NewLayout(spec)
	if err != nil {
		return Result{}, err
	}
	touched := int64(l.RopeBytesPerSlot()) * int64(l.Slots())
	var e kernels.Engine
	var arena kernels.Arena
	var baseline func() error
	var cleanup func()
	device := o.Device
	if device == "auto" {
		device = "cpu"
		if d, err := cudadrv.Load(); err == nil {
			if n, err := d.DeviceCount(); err == nil && n > 0 {
				device = "cuda"
			}
		}
	}
	switch device {
	case "cpu":
		e, arena, baseline, err = cpuArms(l, touched)
	case "cuda":
		e, arena, baseline, cleanup, err = cudaArms(l, touched)
	default:
		err = fmt.Errorf("device %q: want cpu, cuda or auto: %w", o.Device, ErrOptions)
	}
	if err != nil {
		return Result{}, err
	}
	if cleanup != nil {
		defer cleanup()
	}
	// Every slot by +7 then -7 by turns, so values stay bounded.
	slots, plus, minus := make([]int, l.Slots()), make([]int, l.Slots()), make([]int, l.Slots())
	for i := range slots {
		slots[i], plus[i], minus[i] = i, 7, -7
	}
	flip := false
	rotate := func() error {
		flip = !flip
		if flip {
			return e.Rotate(arena, slots, plus)
		}
		return e.Rotate(arena, slots, minus)
	}
	// One untimed round of each warms caches, page tables and the JIT.
	if err := rotate(); err != nil {
		return Result{}, err
	}
	if err := baseline(); err != nil {
		return Result{}, err
	}
	var rot, base []float64
	for i := 0; i < o.Iters; i++ {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		for _, arm := range []struct {
			fn  func() error
			out *[]float64
		}{{rotate, &rot}, {baseline, &base}} {
			start := time.Now()
			if err := arm.fn(); err != nil {
				return Result{}, err
			}
			*arm.out = append(*arm.out, float64(touched)/time.Since(start).Seconds()/1e9)
		}
	}
	r := Result{Scenario: "rotate", Device: device, GBps: median(rot), BaselineGBps: median(base),
		Params: map[string]any{"model": o.Model, "dtype": o.DType.String(), "slots": o.Slots, "layers": o.Layers,
			"iters": o.Iters, "bytes_touched": touched, "workers": runtime.GOMAXPROCS(0)}}
	if device == "cpu" {
		r.Params["kernels"] = kernels.CPUKernels() // avx2 or generic (KVPILOT_CPU_KERNELS=generic)
	}
	if r.BaselineGBps > 0 {
		r.Ratio = r.GBps / r.BaselineGBps
	}
	r.Targets.RatioMin = RatioMinCPU
	if device == "cuda" {
		r.Targets.RatioMin = RatioMinCUDA
	}
	r.Targets.Met = r.Ratio >= r.Targets.RatioMin
	return r, nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// cpuArms are the CPU engine, its arena, and the baseline: a copy of the
// bytes the rotation touches.
func cpuArms(l *kernels.Layout, touched int64) (kernels.Engine, kernels.Arena, func() error, error) {
	arena := kernels.Arena{Layout: l, Host: aligned(int(l.ArenaBytes()))}
	fill(arena.Host, l.DType())
	src, dst := aligned(int(touched)), aligned(int(touched))
	fill(src, l.DType())
	workers := runtime.GOMAXPROCS(0)
	baseline := func() error {
		// memcpy of the same bytes, split over as many goroutines as the
		// engine uses, so the ratio compares work, not parallelism.
		var wg sync.WaitGroup
		chunk := (len(src) + workers - 1) / workers
		for lo := 0; lo < len(src); lo += chunk {
			hi := min(lo+chunk, len(src))
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[lo:hi], src[lo:hi])
			}()
		}
		wg.Wait()
		return nil
	}
	return kernels.NewCPU(), arena, baseline, nil
}

// cudaArms are the CUDA engine, its arena on device 0, the baseline (a
// device-to-device copy of the bytes the rotation touches) and what frees
// them.
func cudaArms(l *kernels.Layout, touched int64) (e kernels.Engine, arena kernels.Arena, baseline func() error, cleanup func(), err error) {
	d, err := cudadrv.Load()
	if err != nil {
		return nil, arena, nil, nil, err
	}
	ctx, err := d.Open(0)
	if err != nil {
		return nil, arena, nil, nil, err
	}
	ce, err := cuda.New(ctx)
	if err != nil {
		_ = ctx.Close()
		return nil, arena, nil, nil, err
	}
	var ptrs []cudadrv.DevicePtr
	cleanup = func() {
		for _, p := range ptrs {
			_ = ctx.MemFree(p)
		}
		_ = ce.Close()
		_ = ctx.Close()
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	alloc := func(n int64) (cudadrv.DevicePtr, error) {
		p, err := ctx.MemAlloc(int(n))
		if err == nil {
			ptrs = append(ptrs, p)
		}
		return p, err
	}
	arenaPtr, err := alloc(l.ArenaBytes())
	if err != nil {
		return nil, arena, nil, nil, err
	}
	host := aligned(int(l.ArenaBytes()))
	fill(host, l.DType())
	if err = ctx.CopyHtoD(arenaPtr, host); err != nil {
		return nil, arena, nil, nil, err
	}
	src, err := alloc(touched)
	if err != nil {
		return nil, arena, nil, nil, err
	}
	dst, err := alloc(touched)
	if err != nil {
		return nil, arena, nil, nil, err
	}
	baseline = func() error { return ctx.CopyDtoD(dst, src, int(touched)) }
	return ce, kernels.Arena{Layout: l, Device: arenaPtr}, baseline, cleanup, nil
}

// aligned returns n zeroed bytes with an 8-byte-aligned base.
func aligned(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// fill writes small finite values of dt (random bytes could be NaN or huge).
func fill(b []byte, dt kernels.DType) {
	one := []byte{0x80, 0x3f} // bf16 1.0
	switch dt {
	case kernels.F32:
		one = []byte{0, 0, 0x80, 0x3f}
	case kernels.F16:
		one = []byte{0, 0x3c}
	}
	for i := 0; i+len(one) <= len(b); i += len(one) {
		copy(b[i:], one)
	}
}
