package kernels

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// CPU is the pure-Go engine. It splits each call across goroutines by
// slot ranges and walks buffer by buffer within a range, so consecutive slots
// touch consecutive rows.
type CPU struct {
	workers int
}

// NewCPU returns a CPU engine using up to GOMAXPROCS goroutines per call.
func NewCPU() *CPU { return &CPU{workers: runtime.GOMAXPROCS(0)} }

// Device implements Engine.
func (e *CPU) Device() string { return "cpu" }

// minBytesPerWorker keeps small calls on one goroutine, where spawning
// would cost more than it saves.
const minBytesPerWorker = 256 << 10

// parallel runs fn over [0, n) in contiguous chunks on up to e.workers
// goroutines, given about bytesPerItem bytes of memory traffic per item.
func (e *CPU) parallel(n, bytesPerItem int, fn func(lo, hi int)) {
	w := min(e.workers, n*bytesPerItem/minBytesPerWorker+1, n)
	if w <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// deltaTables holds cos/sin of every distinct Δ of a call, half entries each.
type deltaTables struct {
	half     int
	cos, sin []float32
	index    []int32
}

func newDeltaTables(l *Layout, deltas []int) *deltaTables {
	if l.rotary == nil {
		return nil
	}
	distinct, index := DeltaIndex(deltas)
	half := l.rotary.Dim() / 2
	t := &deltaTables{half: half, cos: make([]float32, len(distinct)*half), sin: make([]float32, len(distinct)*half), index: index}
	for k, d := range distinct {
		// Cannot fail: the slices are sized for this rotary.
		_ = l.rotary.DeltaTable(d, t.cos[k*half:(k+1)*half], t.sin[k*half:(k+1)*half])
	}
	return t
}

func (t *deltaTables) of(i int) (cos, sin []float32) {
	k := int(t.index[i]) * t.half
	return t.cos[k : k+t.half], t.sin[k : k+t.half]
}

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
	tabs := newDeltaTables(l, deltas)
	e.parallel(len(slots), 2*l.RopeBytesPerSlot(), func(lo, hi int) {
		for _, b := range l.ropeBuf {
			buf := &l.spec.Buffers[b]
			for i := lo; i < hi; i++ {
				if deltas[i] == 0 {
					continue // identity: leave the bytes alone, -0 included
				}
				cos, sin := tabs.of(i)
				rotateRow(a.Host, l, buf, slots[i], cos, sin)
			}
		}
	})
	return nil
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
	e.move(a, dst, a, src, deltas, newDeltaTables(a.Layout, deltas), stage)
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
	e.move(dst, dstSlots, src, srcSlots, nil, nil, stage)
	return nil
}

// move copies rows src[i] -> dst[i] of every buffer and, when tabs is set,
// rotates each destination's RoPE slice by deltas[i]. With stage, all source
// rows are first gathered into a temporary so no write can clobber a
// source another pair still has to read.
func (e *CPU) move(da Arena, dst []int, sa Arena, src []int, deltas []int, tabs *deltaTables, stage bool) {
	n := len(src)
	if n == 0 {
		return
	}
	sl, dl := sa.Layout, da.Layout
	slotBytes := sl.SlotBytes()
	var tmp []byte
	if stage {
		tmp = make([]byte, n*slotBytes)
		e.parallel(n, 2*slotBytes, func(lo, hi int) {
			off := 0
			for b := range sl.spec.Buffers {
				sb := &sl.spec.Buffers[b]
				for i := lo; i < hi; i++ {
					copy(tmp[i*slotBytes+off:i*slotBytes+off+sb.RowBytes], row(sa.Host, sb, src[i]))
				}
				off += sb.RowBytes
			}
		})
	}
	e.parallel(n, 2*slotBytes, func(lo, hi int) {
		off := 0
		for b := range dl.spec.Buffers {
			db, sb := &dl.spec.Buffers[b], &sl.spec.Buffers[b]
			for i := lo; i < hi; i++ {
				out := row(da.Host, db, dst[i])
				if stage {
					copy(out, tmp[i*slotBytes+off:i*slotBytes+off+db.RowBytes])
				} else {
					copy(out, row(sa.Host, sb, src[i])) // copy is a memmove: src == dst is fine
				}
				if tabs != nil && db.Rope != nil && deltas[i] != 0 {
					cos, sin := tabs.of(i)
					rotateRow(da.Host, dl, db, dst[i], cos, sin)
				}
			}
			off += db.RowBytes
		}
	})
}

func row(mem []byte, b *BufferSpec, slot int) []byte {
	off := b.Offset + int64(slot)*int64(b.RowBytes)
	return mem[off : off+int64(b.RowBytes)]
}
