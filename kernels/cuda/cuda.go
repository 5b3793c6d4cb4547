// Package cuda is the CUDA implementation of kernels.Engine. It loads the
// committed PTX (kvkernels.ptx, generated from kvkernels.cu by gen-ptx.sh)
// through the driver API (kernels/cudadrv: purego, no cgo) and runs on
// device arenas (kernels.Arena with Device set). Results equal the CPU
// engine's bit for bit: same cos/sin tables, same unfused float32
// arithmetic, same round-to-nearest-even conversions.
//
// Copy also accepts host arenas whose memory is pinned and device-mapped by
// the engine's context (cudadrv HostRegister with HostRegisterDeviceMap, or
// MemAllocHost): the move kernel then reads or writes host memory over the
// bus, which is how tier transfers between the device and host pools run.
//
// Every call writes its slot lists and tables into the engine's page-locked
// argument memory (args.go), queues one copy of them and the launch on the
// context's default stream and waits for completion, so arguments never
// outlive the call (Go memory is never read asynchronously: where pinning
// fails, the copy from Go memory is synchronous).
package cuda

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

//go:embed kvkernels.ptx
var ptx []byte

// PTX returns the embedded PTX text.
func PTX() []byte { return ptx }

// Engine runs the kernels on one CUDA context. Calls are serialized.
type Engine struct {
	ctx    *cudadrv.Context
	mod    *cudadrv.Module
	rotate map[kernels.DType]cudadrv.Function
	move   map[kernels.DType]cudadrv.Function
	cpu    *kernels.CPU

	mu      sync.Mutex
	layouts map[*kernels.Layout]*devLayout
	st      argStage
}

var _ kernels.Engine = (*Engine)(nil)

// devLayout is a layout's buffer descriptors in device memory.
type devLayout struct {
	bufs     cudadrv.DevicePtr // BufDesc[nBufs]
	ropeBufs cudadrv.DevicePtr // int32[nRope]
	nRope    int
	maxHeads int
}

// New loads the kernels into ctx. The Engine does not own ctx.
func New(ctx *cudadrv.Context) (*Engine, error) {
	mod, err := ctx.ModuleLoadData(ptx)
	if err != nil {
		return nil, fmt.Errorf("cuda kernels: load PTX: %w", err)
	}
	e := &Engine{ctx: ctx, mod: mod, cpu: kernels.NewCPU(), layouts: map[*kernels.Layout]*devLayout{},
		rotate: map[kernels.DType]cudadrv.Function{}, move: map[kernels.DType]cudadrv.Function{}}
	for dt, name := range map[kernels.DType]string{kernels.F32: "f32", kernels.BF16: "bf16", kernels.F16: "f16",
		kernels.E4M3: "e4m3", kernels.E5M2: "e5m2"} {
		if e.rotate[dt], err = mod.Function("kv_rotate_" + name); err != nil {
			_ = mod.Unload()
			return nil, fmt.Errorf("cuda kernels: %w", err)
		}
		if e.move[dt], err = mod.Function("kv_move_" + name); err != nil {
			_ = mod.Unload()
			return nil, fmt.Errorf("cuda kernels: %w", err)
		}
	}
	return e, nil
}

// Close frees the engine's device memory and unloads the module.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, d := range e.layouts {
		keep(e.ctx.MemFree(d.bufs))
		if d.ropeBufs != 0 {
			keep(e.ctx.MemFree(d.ropeBufs))
		}
	}
	clear(e.layouts)
	keep(e.freeArgs())
	keep(e.mod.Unload())
	return first
}

// Device implements kernels.Engine.
func (e *Engine) Device() string { return "cuda" }

const bufDescBytes = 24 // sizeof(BufDesc) in kvkernels.cu

// encodeDescs serializes buffer descriptors as kvkernels.cu's BufDesc;
// offsets override the layout's buffer offsets when non-nil (temp arenas).
func encodeDescs(l *kernels.Layout, offsets []int64) []byte {
	out := make([]byte, bufDescBytes*l.NumBuffers())
	putDescs(out, l, offsets)
	return out
}

// putDescs is encodeDescs into out (bufDescBytes per buffer).
func putDescs(out []byte, l *kernels.Layout, offsets []int64) {
	for i := 0; i < l.NumBuffers(); i++ {
		b := l.Buffer(i)
		o := out[i*bufDescBytes:]
		off := b.Offset
		if offsets != nil {
			off = offsets[i]
		}
		binary.LittleEndian.PutUint64(o[0:], uint64(off))
		binary.LittleEndian.PutUint32(o[8:], uint32(b.RowBytes))
		ropeOff, heads, stride := int32(-1), uint32(0), uint32(0)
		if b.Rope != nil {
			ropeOff, heads, stride = int32(b.Rope.Offset), uint32(b.Rope.Heads), uint32(b.Rope.HeadStride)
		}
		binary.LittleEndian.PutUint32(o[12:], uint32(ropeOff))
		binary.LittleEndian.PutUint32(o[16:], heads)
		binary.LittleEndian.PutUint32(o[20:], stride)
	}
}

func (e *Engine) layout(l *kernels.Layout) (*devLayout, error) {
	if d, ok := e.layouts[l]; ok {
		return d, nil
	}
	d := &devLayout{}
	descs := encodeDescs(l, nil)
	var rope []byte
	for i := 0; i < l.NumBuffers(); i++ {
		if r := l.Buffer(i).Rope; r != nil {
			rope = binary.LittleEndian.AppendUint32(rope, uint32(i))
			d.maxHeads = max(d.maxHeads, r.Heads)
			d.nRope++
		}
	}
	var err error
	if d.bufs, err = e.upload(descs); err != nil {
		return nil, err
	}
	if len(rope) > 0 {
		if d.ropeBufs, err = e.upload(rope); err != nil {
			_ = e.ctx.MemFree(d.bufs)
			return nil, err
		}
	}
	e.layouts[l] = d
	return d, nil
}

// upload copies b into a fresh device allocation.
func (e *Engine) upload(b []byte) (cudadrv.DevicePtr, error) {
	p, err := e.ctx.MemAlloc(len(b))
	if err != nil {
		return 0, err
	}
	if err := e.ctx.CopyHtoD(p, b); err != nil {
		_ = e.ctx.MemFree(p)
		return 0, err
	}
	return p, nil
}

// blockShape picks threads per row (x: a warp multiple up to 256, or for
// rows of less work than a warp the power of two that covers it, so one
// warp serves several rows) and rows per block (y) so a block has about 256
// threads. An MLA row's RoPE slice is 8 threads' work when vectorized.
func blockShape(work int) cudadrv.Dim3 {
	x := min(256, (work+31)/32*32)
	if work < 32 {
		x = 1
		for x < work {
			x <<= 1
		}
	}
	return cudadrv.Dim3{X: uint32(x), Y: uint32(max(1, 256/x)), Z: 1}
}

func grid(n int, block cudadrv.Dim3, ys int) (cudadrv.Dim3, error) {
	if ys > 65535 {
		return cudadrv.Dim3{}, fmt.Errorf("cuda kernels: %d buffers exceed the grid's 65535: %w", ys, kernels.ErrLayout)
	}
	return cudadrv.Dim3{X: uint32((n + int(block.Y) - 1) / int(block.Y)), Y: uint32(ys), Z: 1}, nil
}

func interleaved(l *kernels.Layout) int32 {
	if l.Spec().Rope.Pairing == rope.Interleaved {
		return 1
	}
	return 0
}
