// Package rotatebench measures RoPE Δ-rotation throughput for `kvpilot
// bench rotate`: bytes of RoPE slice rotated per second against a copy of
// as many bytes in the same run (memcpy on as many goroutines on the CPU, a
// device-to-device copy on a GPU). Targets: ratio >= 0.5 on CPU, >= 0.8 on
// GPU: a splice re-rotates only the RoPE slice of the pages after the edit,
// so rotating at half a copy's speed (a GPU's copy engines set a higher
// bar) keeps a splice far cheaper than prefilling those pages again.
//
// Bytes are counted once (not read plus write), and the copy is
// contiguous. For MLA that favours the copy: its 2×4 MiB (bf16) stay in
// the last-level cache, while the rotated k_pe slices (128 of every 1152
// bytes) are spread over a 37 MiB arena, a new page every few rows.
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
	device := o.Device
	if device == "auto" {
		device = "cpu"
		if d, err := cudadrv.Load(); err == nil {
			if n, err := d.DeviceCount(); err == nil && n > 0 {
				device = "cuda"
			}
		}
	}
	var a arms
	switch device {
	case "cpu":
		a = cpuArms(l, touched)
	case "cuda":
		a, err = cudaArms(l, touched)
	default:
		err = fmt.Errorf("device %q: want cpu, cuda or auto: %w", o.Device, ErrOptions)
	}
	if err != nil {
		return Result{}, err
	}
	defer a.cleanup()
	// Every slot by +7 then -7 by turns, so values stay bounded.
	slots, deltas := make([]int, l.Slots()), [2][]int{make([]int, l.Slots()), make([]int, l.Slots())}
	for i := range slots {
		slots[i], deltas[0][i], deltas[1][i] = i, 7, -7
	}
	turns := 0
	rotate := func() error {
		turns++
		return a.e.Rotate(a.arena, slots, deltas[turns%2])
	}
	// Round -1, untimed, warms caches, page tables and the JIT.
	var gbps [2][]float64 // rotation, baseline
	for i := -1; i < o.Iters; i++ {
		for k, fn := range []func() error{rotate, a.baseline} {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			start := time.Now()
			if err := fn(); err != nil {
				return Result{}, err
			}
			if i >= 0 {
				gbps[k] = append(gbps[k], float64(touched)/time.Since(start).Seconds()/1e9)
			}
		}
	}
	r := Result{Scenario: "rotate", Device: device, GBps: median(gbps[0]), BaselineGBps: median(gbps[1]), Targets: Targets{RatioMin: a.ratioMin},
		Params: map[string]any{"model": o.Model, "dtype": o.DType.String(), "slots": o.Slots, "layers": o.Layers,
			"iters": o.Iters, "bytes_touched": touched, "workers": runtime.GOMAXPROCS(0)}}
	if device == "cpu" {
		r.Params["kernels"] = kernels.CPUKernels() // avx2 or generic (KVPILOT_CPU_KERNELS=generic)
	}
	if r.BaselineGBps > 0 {
		r.Ratio = r.GBps / r.BaselineGBps
	}
	r.Targets.Met = r.Ratio >= r.Targets.RatioMin
	return r, nil
}

func median(v []float64) float64 {
	return slices.Sorted(slices.Values(v))[len(v)/2]
}

// arms are a device's engine and arena, the baseline (a copy of the bytes
// the rotation touches), what frees them, and the device's target ratio.
type arms struct {
	e        kernels.Engine
	arena    kernels.Arena
	baseline func() error
	cleanup  func()
	ratioMin float64
}

// cpuArms copy with as many goroutines as the engine uses, so the ratio
// compares work, not parallelism.
func cpuArms(l *kernels.Layout, touched int64) arms {
	arena := kernels.Arena{Layout: l, Host: aligned(int(l.ArenaBytes()))}
	fill(arena.Host, l.DType())
	src, dst := aligned(int(touched)), aligned(int(touched))
	fill(src, l.DType())
	workers := runtime.GOMAXPROCS(0)
	baseline := func() error {
		var wg sync.WaitGroup
		chunk := (len(src) + workers - 1) / workers
		for lo := 0; lo < len(src); lo += chunk {
			hi := min(lo+chunk, len(src))
			wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
		}
		wg.Wait()
		return nil
	}
	return arms{kernels.NewCPU(), arena, baseline, func() {}, RatioMinCPU}
}

// cudaArms are on device 0; the baseline is a device-to-device copy.
func cudaArms(l *kernels.Layout, touched int64) (a arms, err error) {
	d, err := cudadrv.Load()
	if err != nil {
		return a, err
	}
	ctx, err := d.Open(0)
	if err != nil {
		return a, err
	}
	ce, err := cuda.New(ctx)
	if err != nil {
		_ = ctx.Close()
		return a, err
	}
	var ptrs []cudadrv.DevicePtr // the arena, the copy's source and destination
	a.cleanup = func() {
		for _, p := range ptrs {
			_ = ctx.MemFree(p)
		}
		_ = ce.Close()
		_ = ctx.Close()
	}
	defer func() {
		if err != nil {
			a.cleanup()
		}
	}()
	for _, n := range []int64{l.ArenaBytes(), touched, touched} {
		p, err := ctx.MemAlloc(int(n))
		if err != nil {
			return a, err
		}
		ptrs = append(ptrs, p)
	}
	host := aligned(int(l.ArenaBytes()))
	fill(host, l.DType())
	if err = ctx.CopyHtoD(ptrs[0], host); err != nil {
		return a, err
	}
	a.e, a.arena, a.ratioMin = ce, kernels.Arena{Layout: l, Device: ptrs[0]}, RatioMinCUDA
	a.baseline = func() error { return ctx.CopyDtoD(ptrs[2], ptrs[1], int(touched)) }
	return a, nil
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
