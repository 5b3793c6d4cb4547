package kernels

import (
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// rowKernel names the inner rotation loop of a call: dtype × pairing.
type rowKernel uint8

const (
	kF32Half rowKernel = iota
	kF32Inter
	kBF16Half
	kBF16Inter
	kF16Half
	kF16Inter
	kE4M3Half
	kE4M3Inter
	kE5M2Half
	kE5M2Inter
)

func kernelFor(dt DType, p rope.Pairing) rowKernel {
	k := kF32Half
	switch dt {
	case BF16:
		k = kBF16Half
	case F16:
		k = kF16Half
	case E4M3:
		k = kE4M3Half
	case E5M2:
		k = kE5M2Half
	}
	if p == rope.Interleaved {
		k++
	}
	return k
}

func (k rowKernel) interleaved() bool { return k&1 == 1 }

// vectorized reports whether the vector kernels have k (fp8 rows are
// rotated in plain Go).
func (k rowKernel) vectorized() bool { return k < kE4M3Half }

// elemSize is the size of k's elements in bytes.
func (k rowKernel) elemSize() int {
	switch {
	case k >= kE4M3Half:
		return 1
	case k >= kBF16Half:
		return 2
	}
	return 4
}

// rotTables holds a call's cos/sin of every distinct Δ, built once per call
// into reused storage: cos and sin in pair order for the plain-Go kernels,
// and, when the vector kernels run, va and vb in the order they read
// (vectorTables in simd_amd64.go).
type rotTables struct {
	kernel   rowKernel
	simd     bool // use the vector kernels
	half     int  // pairs per head
	cos, sin []float32
	vw       int // entries per Δ in va and vb
	va, vb   []float32
	index    []int32 // deltas[i] -> distinct table
	distinct []int
	pos      map[int]int32
}

// build fills t for layout l (which carries RoPE) and deltas.
func (t *rotTables) build(l *Layout, deltas []int) {
	cfg := l.spec.Rope
	t.kernel = kernelFor(l.spec.DType, cfg.Pairing)
	t.simd = simdEnabled() && t.kernel.vectorized()
	if t.pos == nil {
		t.pos = make(map[int]int32)
	}
	t.distinct, t.index = DeltaIndexInto(t.distinct[:0], t.index[:0], t.pos, deltas, false)
	h := cfg.Dim / 2
	t.half = h
	t.cos, t.sin = grow(t.cos, len(t.distinct)*h), grow(t.sin, len(t.distinct)*h)
	for k, d := range t.distinct {
		// Cannot fail: the slices are sized for this rotary.
		_ = l.rotary.DeltaTable(d, t.cos[k*h:(k+1)*h], t.sin[k*h:(k+1)*h])
	}
	if !t.simd {
		return
	}
	t.vw = vectorTableWidth(t.kernel, h)
	t.va, t.vb = grow(t.va, len(t.distinct)*t.vw), grow(t.vb, len(t.distinct)*t.vw)
	for k := range t.distinct {
		vectorTables(t.kernel, t.cos[k*h:(k+1)*h], t.sin[k*h:(k+1)*h], t.va[k*t.vw:(k+1)*t.vw], t.vb[k*t.vw:(k+1)*t.vw])
	}
}

// rotBatch is a run of rows of one buffer for the vector kernels, which
// read it through go_asm.h: row i's RoPE slices start at
// base + slots[i]·rowLen and are rotated by the table index[i] unless
// deltas[i] is 0. Walking the rows inside the kernel keeps the per-row cost
// to a few instructions, which matters for MLA's 128-byte k_pe slices.
type rotBatch struct {
	base   unsafe.Pointer
	rowLen uintptr
	slots  *int
	deltas *int
	index  *int32
	count  int
	heads  int
	stride uintptr
	a, b   *float32 // va, vb
	tabLen uintptr  // bytes per distinct Δ in a and b
	n      int      // elements (interleaved) or pairs (half-split) per head done by the vector loop
	hi     uintptr  // byte offset of the y half (half-split)
	pfDist int      // prefetch the row this many items ahead (0: none)
	pfLen  uintptr  // bytes of a row's RoPE extent to prefetch
}

// sparseRow says when a row's RoPE extent is small enough next to the row
// that the hardware prefetchers, which follow dense streams, miss it and
// the kernels should prefetch ahead themselves: MLA's k_pe is 128 of 1152
// bytes, a GQA K row is all RoPE.
const sparseRow = 2

// prefetchRows is how many rows ahead the kernels prefetch sparse rows:
// enough rows to cover a cache and TLB miss (hundreds of ns under
// virtualization), few enough that the lines are still cached when used.
const prefetchRows = 16

// maxBatchBytes bounds the RoPE bytes one vector-kernel call rotates: an
// assembly function cannot be preempted, so a huge call would hold off the
// garbage collector's stop-the-world for its whole length. 1 MiB is tens
// of microseconds. A variable so tests can make batches small.
var maxBatchBytes = 1 << 20

// rotateRows rotates the RoPE slices of rows slots[i] (base + slot·rowLen)
// by the Δ of call item first+i, skipping Δ = 0. The vector kernels take
// what they can of every row; plain Go does the rest.
func (t *rotTables) rotateRows(base unsafe.Pointer, rowLen int, r *RopeSlice, slots, deltas []int, first int) {
	if len(slots) == 0 {
		return
	}
	index := t.index[first : first+len(slots)]
	stride := uintptr(r.HeadStride)
	from := 0
	if t.simd {
		extent := (r.Heads-1)*r.HeadStride + t.sliceBytes()
		rb := rotBatch{base: base, rowLen: uintptr(rowLen), heads: r.Heads, stride: stride, a: &t.va[0], b: &t.vb[0], tabLen: uintptr(t.vw) * 4}
		if rowLen > sparseRow*extent {
			rb.pfDist, rb.pfLen = prefetchRows, uintptr(extent)
		}
		step := max(1, maxBatchBytes/extent)
		for lo := 0; lo < len(slots); lo += step {
			hi := min(lo+step, len(slots))
			rb.slots, rb.deltas, rb.index, rb.count = &slots[lo], &deltas[lo], &index[lo], hi-lo
			from = rotateSIMD(t.kernel, &rb, t.half)
		}
	}
	if from == t.half {
		return
	}
	for i, slot := range slots {
		if deltas[i] == 0 {
			continue // identity: leave the bytes alone, -0 included
		}
		k := int(index[i]) * t.half
		p := unsafe.Add(base, slot*rowLen)
		rotateGeneric(t.kernel, p, r.Heads, stride, t.cos[k:k+t.half:k+t.half], t.sin[k:k+t.half:k+t.half], from)
	}
}

// sliceBytes is the size of one head's RoPE slice.
func (t *rotTables) sliceBytes() int {
	return 2 * t.half * t.kernel.elemSize()
}

// grow returns s resized to n, reusing its array when it is large enough.
func grow(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]float32, n)
}
