package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// A call's arguments (slot lists, table indices, cos/sin tables, buffer
// descriptors) are written straight into page-locked host memory and
// copied to the device scratch with one asynchronous copy queued ahead of
// the launch on the same stream. On an H200 host, building them in Go
// slices and copying those from pageable memory cost more than the rotation
// itself: of one rotation of 32,768 rows (512 MiB of keys), 410 µs of
// encoding and 110 µs of upload beside 376 µs of kernel; this way 230 µs
// (checks included) and 41.

// argAlign keeps every section 256-byte aligned (the kernels load tables
// and rows in 16-byte words).
const argAlign = 256

// argStage is the Engine's argument memory, reused by every call (calls
// are serialized and wait for their kernel, so one call's arguments are
// never overwritten while the device reads them).
type argStage struct {
	host   []byte // page-locked, or Go memory where pinning failed
	pinned bool
	dev    cudadrv.DevicePtr
	devCap int
	used   int

	// indexDeltas' working memory.
	tab      []int32
	distinct []int
	pos      map[int]int32
	cos, sin []float32
}

// reserve lays out sections of the given sizes for one call and returns
// their host memory, to fill, and device addresses (0 for an empty one).
func (e *Engine) reserve(sizes ...int) ([][]byte, []cudadrv.DevicePtr, error) {
	s := &e.st
	total := 0
	for _, n := range sizes {
		total += (n + argAlign - 1) &^ (argAlign - 1)
	}
	if err := e.grow(total); err != nil {
		return nil, nil, err
	}
	secs := make([][]byte, len(sizes))
	ptrs := make([]cudadrv.DevicePtr, len(sizes))
	off := 0
	for i, n := range sizes {
		secs[i] = s.host[off : off+n]
		if n > 0 {
			ptrs[i] = s.dev + cudadrv.DevicePtr(off)
		}
		off += (n + argAlign - 1) &^ (argAlign - 1)
	}
	s.used = total
	return secs, ptrs, nil
}

// grow makes both sides hold at least n bytes, doubling at least (page-
// locked allocations cost milliseconds: a slowly growing call must not pay
// one every time).
func (e *Engine) grow(n int) error {
	s := &e.st
	if n <= s.devCap && n <= len(s.host) {
		return nil
	}
	n = max(n, 1<<16, 2*s.devCap, 2*len(s.host))
	if n > s.devCap {
		if s.dev != 0 {
			if err := e.ctx.MemFree(s.dev); err != nil {
				return fmt.Errorf("cuda kernels: free argument memory: %w", err)
			}
			s.dev, s.devCap = 0, 0
		}
		p, err := e.ctx.MemAlloc(n)
		if err != nil {
			return fmt.Errorf("cuda kernels: %d bytes of argument memory: %w", n, err)
		}
		s.dev, s.devCap = p, n
	}
	if n > len(s.host) {
		if err := e.freeHost(); err != nil {
			return err
		}
		if h, err := e.ctx.MemAllocHost(n); err == nil {
			s.host, s.pinned = h, true
		} else {
			// Pinned memory can be scarce (a locked-memory limit); the
			// synchronous copy from Go memory is slower but correct.
			s.host, s.pinned = make([]byte, n), false
		}
	}
	return nil
}

func (e *Engine) freeHost() error {
	s := &e.st
	if s.pinned {
		if err := e.ctx.MemFreeHost(s.host); err != nil {
			return fmt.Errorf("cuda kernels: free pinned argument memory: %w", err)
		}
	}
	s.host, s.pinned = nil, false
	return nil
}

// freeArgs releases the argument memory (Close).
func (e *Engine) freeArgs() error {
	s := &e.st
	err := e.freeHost()
	if s.dev != 0 {
		if ferr := e.ctx.MemFree(s.dev); err == nil {
			err = ferr
		}
		s.dev, s.devCap = 0, 0
	}
	return err
}

// uploadArgs queues the copy of the reserved sections on the default stream,
// where the launch that follows sees them.
func (e *Engine) uploadArgs() error {
	s := &e.st
	if s.used == 0 {
		return nil
	}
	if s.pinned {
		return e.ctx.CopyHtoDAsync(s.dev, s.host[:s.used], 0)
	}
	return e.ctx.CopyHtoD(s.dev, s.host[:s.used])
}

// putInt32s writes v as little-endian int32s.
func putInt32s(dst []byte, v []int) {
	for i, x := range v {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(int32(x)))
	}
}

// indexDeltas groups deltas by value (kernels.DeltaIndexInto): afterwards
// st.tab[i] is the table of deltas[i] (-1 for Δ = 0, which the kernels
// leave untouched) and st.distinct lists each non-zero Δ once.
func (e *Engine) indexDeltas(deltas []int) {
	s := &e.st
	if s.pos == nil {
		s.pos = map[int]int32{}
	}
	s.distinct, s.tab = kernels.DeltaIndexInto(s.distinct[:0], s.tab[:0], s.pos, deltas, true)
}

// deltaSizes are the byte sizes of the index and of each of the cos and
// sin tables, for indexDeltas' result.
func (e *Engine) deltaSizes(r *rope.Rotary) (idx, table int) {
	return 4 * len(e.st.tab), 4 * (r.Dim() / 2) * len(e.st.distinct)
}

// putDeltas writes indexDeltas' index and the cos/sin tables of every
// distinct Δ, exactly as the CPU engine computes them.
func (e *Engine) putDeltas(r *rope.Rotary, idx, cos, sin []byte) {
	s := &e.st
	for i, k := range s.tab {
		binary.LittleEndian.PutUint32(idx[4*i:], uint32(k))
	}
	half := r.Dim() / 2
	if cap(s.cos) < half {
		s.cos, s.sin = make([]float32, half), make([]float32, half)
	}
	c, sn := s.cos[:half], s.sin[:half]
	for t, d := range s.distinct {
		_ = r.DeltaTable(d, c, sn) // sized for r: cannot fail
		for i := range half {
			o := 4 * (t*half + i)
			binary.LittleEndian.PutUint32(cos[o:], math.Float32bits(c[i]))
			binary.LittleEndian.PutUint32(sin[o:], math.Float32bits(sn[i]))
		}
	}
}
