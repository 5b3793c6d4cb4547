package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// CPU is the host-memory engine. It splits each call across goroutines by
// slot ranges and walks buffer by buffer within a range, so consecutive slots
// touch consecutive rows. Rotation runs the vector kernels where the CPU has
// them (CPUKernels) and plain Go elsewhere; no cgo either way. A call
// allocates nothing in the steady state, except the staging copy of a move
// whose destinations overlap its sources.
type CPU struct {
	workers int
}

// NewCPU returns a CPU engine using up to GOMAXPROCS goroutines per call.
func NewCPU() *CPU { return &CPU{workers: runtime.GOMAXPROCS(0)} }

// Device implements Engine.
func (e *CPU) Device() string { return "cpu" }

// rotateJob is one Rotate call, pooled so the hot path allocates nothing.
type rotateJob struct {
	wg     sync.WaitGroup
	tabs   rotTables
	mem    unsafe.Pointer
	l      *Layout
	slots  []int
	deltas []int
}

var rotatePool = sync.Pool{New: func() any { return new(rotateJob) }}

// Rotate implements Engine.
func (e *CPU) Rotate(a Arena, slots, deltas []int) error {
	if err := a.checkHost(); err != nil {
		return fmt.Errorf("rotate: %w", err)
	}
	l := a.Layout
	if err := CheckRotate(l, slots, deltas); err != nil {
		return err
	}
	if l.rotary == nil || len(slots) == 0 {
		return nil
	}
	j := rotatePool.Get().(*rotateJob)
	j.tabs.build(l, deltas)
	j.mem, j.l, j.slots, j.deltas = unsafe.Pointer(unsafe.SliceData(a.Host)), l, slots, deltas
	e.parallel(len(slots), 2*l.RopeBytesPerSlot(), j, &j.wg)
	j.mem, j.l, j.slots, j.deltas = nil, nil, nil, nil // drop references before pooling
	rotatePool.Put(j)
	return nil
}

// runChunk rotates items [lo, hi) buffer by buffer, so consecutive slots
// touch consecutive rows of one buffer.
func (j *rotateJob) runChunk(lo, hi int) {
	for _, b := range j.l.ropeBuf {
		buf := &j.l.spec.Buffers[b]
		base := unsafe.Add(j.mem, buf.Offset+int64(buf.Rope.Offset))
		j.tabs.rotateRows(base, buf.RowBytes, buf.Rope, j.slots[lo:hi], j.deltas[lo:hi], lo)
	}
}

// GatherRotateScatter implements Engine.
func (e *CPU) GatherRotateScatter(a Arena, src, dst, deltas []int) error {
	if err := a.checkHost(); err != nil {
		return fmt.Errorf("gather-rotate-scatter: %w", err)
	}
	stage, err := CheckGatherRotateScatter(a.Layout, src, dst, deltas)
	if err != nil {
		return err
	}
	e.move(a, dst, a, src, deltas, stage)
	return nil
}

// Copy implements Engine.
func (e *CPU) Copy(dst Arena, dstSlots []int, src Arena, srcSlots []int) error {
	if err := dst.checkHost(); err != nil {
		return fmt.Errorf("copy destination: %w", err)
	}
	if err := src.checkHost(); err != nil {
		return fmt.Errorf("copy source: %w", err)
	}
	same := sameMemory(dst, src)
	if same && (unsafe.SliceData(dst.Host) != unsafe.SliceData(src.Host) || dst.Layout != src.Layout) {
		return fmt.Errorf("copy: arenas overlap without being the same arena and layout: %w", ErrArgs)
	}
	stage, err := CheckMove("copy", dst.Layout, dstSlots, src.Layout, srcSlots, nil, same)
	if err != nil {
		return err
	}
	e.move(dst, dstSlots, src, srcSlots, nil, stage)
	return nil
}

// moveJob is one row move (GatherRotateScatter or Copy), pooled.
type moveJob struct {
	wg      sync.WaitGroup
	tabs    rotTables
	rotate  bool
	gather  bool // running the staging pass: sources into tmp
	dst     unsafe.Pointer
	src     unsafe.Pointer
	dl, sl  *Layout
	dstS    []int
	srcS    []int
	deltas  []int
	tmp     []byte
	slotLen int
}

var movePool = sync.Pool{New: func() any { return new(moveJob) }}

// zeroSlot addresses a single row directly: base is the row, rowLen 0.
var zeroSlot = [1]int{0}

// move copies rows src[i] -> dst[i] of every buffer and, when deltas is
// set, rotates each destination's RoPE slice by deltas[i]. With stage, all
// source rows are first gathered into a temporary so no write can clobber a
// source another pair still has to read.
func (e *CPU) move(da Arena, dst []int, sa Arena, src []int, deltas []int, stage bool) {
	n := len(src)
	if n == 0 {
		return
	}
	j := movePool.Get().(*moveJob)
	j.dst, j.src = unsafe.Pointer(unsafe.SliceData(da.Host)), unsafe.Pointer(unsafe.SliceData(sa.Host))
	j.dl, j.sl, j.dstS, j.srcS, j.deltas = da.Layout, sa.Layout, dst, src, deltas
	j.slotLen = sa.Layout.SlotBytes()
	j.rotate = deltas != nil && da.Layout.rotary != nil
	if j.rotate {
		j.tabs.build(da.Layout, deltas)
	}
	j.tmp = nil
	if stage {
		// Sized by the call: proportional to the data moved, and only for
		// moves whose destinations overlap their sources.
		j.tmp = make([]byte, n*j.slotLen)
		j.gather = true
		e.parallel(n, 2*j.slotLen, j, &j.wg)
		j.gather = false
	}
	e.parallel(n, 2*j.slotLen, j, &j.wg)
	j.dst, j.src, j.dl, j.sl, j.dstS, j.srcS, j.deltas, j.tmp = nil, nil, nil, nil, nil, nil, nil, nil
	movePool.Put(j)
}

func (j *moveJob) runChunk(lo, hi int) {
	off := 0
	for b := range j.sl.spec.Buffers {
		sb, db := &j.sl.spec.Buffers[b], &j.dl.spec.Buffers[b]
		rowLen := int64(sb.RowBytes)
		for i := lo; i < hi; i++ {
			from := unsafe.Add(j.src, sb.Offset+int64(j.srcS[i])*rowLen)
			if j.gather {
				copy(j.tmp[i*j.slotLen+off:][:rowLen], unsafe.Slice((*byte)(from), rowLen))
				continue
			}
			if j.tmp != nil {
				from = unsafe.Pointer(&j.tmp[i*j.slotLen+off])
			}
			to := unsafe.Add(j.dst, db.Offset+int64(j.dstS[i])*rowLen)
			// copy is a memmove: a slot moved onto itself is fine.
			copy(unsafe.Slice((*byte)(to), rowLen), unsafe.Slice((*byte)(from), rowLen))
			if j.rotate && db.Rope != nil {
				// One row, just copied and so cached: no prefetch to gain.
				j.tabs.rotateRows(unsafe.Add(to, db.Rope.Offset), 0, db.Rope, zeroSlot[:], j.deltas[i:i+1], i)
			}
		}
		off += sb.RowBytes
	}
}
