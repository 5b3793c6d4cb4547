package kernels

import (
	"fmt"
	"sort"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// RopeSlice says where the rotary elements of a RoPE-carrying buffer sit in
// its row: head h's Rope.Dim elements start at byte Offset + h*HeadStride.
type RopeSlice struct {
	Offset     int
	Heads      int
	HeadStride int
}

// BufferSpec is one buffer of an arena: Slots rows of RowBytes bytes at
// byte Offset. Rope is nil for buffers without RoPE (V, MLA-less K_nope...).
type BufferSpec struct {
	Name     string
	Offset   int64
	RowBytes int
	Rope     *RopeSlice
}

// LayoutSpec describes an arena: what the engine registers.
type LayoutSpec struct {
	DType   DType
	Slots   int
	Buffers []BufferSpec
	Rope    rope.Config
}

// Layout is a validated LayoutSpec with its RoPE frequencies computed. It is
// immutable and shared by every call on arenas of that layout.
type Layout struct {
	spec    LayoutSpec
	rotary  *rope.Rotary
	size    int64
	rowSum  int   // sum of RowBytes over buffers: bytes one slot spans
	ropeBuf []int // indices of buffers with a RopeSlice
}

// maxSlots bounds slot indices so every implementation can carry them in an int32.
const maxSlots = 1<<31 - 1

// NewLayout validates s: known dtype and RoPE config; element-aligned
// offsets and strides; RoPE slices inside their rows; buffers that do not
// overlap. It copies s, so later edits to s do not affect the Layout.
func NewLayout(s LayoutSpec) (*Layout, error) {
	esz := s.DType.Size()
	if esz == 0 {
		return nil, fmt.Errorf("layout dtype %v: %w", s.DType, ErrLayout)
	}
	if s.Slots <= 0 || s.Slots > maxSlots {
		return nil, fmt.Errorf("layout slots %d must be in [1, %d]: %w", s.Slots, maxSlots, ErrLayout)
	}
	if len(s.Buffers) == 0 {
		return nil, fmt.Errorf("layout has no buffers: %w", ErrLayout)
	}
	s.Buffers = append([]BufferSpec(nil), s.Buffers...)
	l := &Layout{spec: s}
	var hasRope bool
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.Rope != nil {
			r := *b.Rope
			b.Rope = &r
			hasRope = true
		}
	}
	if hasRope {
		rot, err := rope.New(s.Rope)
		if err != nil {
			return nil, fmt.Errorf("layout: %w", err)
		}
		l.rotary = rot
	}
	type span struct {
		lo, hi int64
		i      int
	}
	spans := make([]span, 0, len(s.Buffers))
	for i, b := range s.Buffers {
		where := fmt.Sprintf("layout buffer %d (%s)", i, b.Name)
		if b.Offset < 0 || b.Offset%int64(esz) != 0 {
			return nil, fmt.Errorf("%s: offset %d must be >= 0 and a multiple of %d: %w", where, b.Offset, esz, ErrLayout)
		}
		if b.RowBytes <= 0 || b.RowBytes%esz != 0 {
			return nil, fmt.Errorf("%s: row bytes %d must be > 0 and a multiple of %d: %w", where, b.RowBytes, esz, ErrLayout)
		}
		if r := b.Rope; r != nil {
			sliceBytes := s.Rope.Dim * esz
			if r.Heads <= 0 || r.Offset < 0 || r.HeadStride < 0 || r.Offset%esz != 0 || r.HeadStride%esz != 0 {
				return nil, fmt.Errorf("%s: rope slice %+v needs heads > 0 and non-negative, element-aligned offset and stride: %w", where, *r, ErrLayout)
			}
			if r.Heads > 1 && r.HeadStride < sliceBytes {
				return nil, fmt.Errorf("%s: rope head stride %d bytes is less than a %d-byte slice, heads would overlap: %w", where, r.HeadStride, sliceBytes, ErrLayout)
			}
			if end := r.Offset + (r.Heads-1)*r.HeadStride + sliceBytes; end > b.RowBytes {
				return nil, fmt.Errorf("%s: rope slice ends at byte %d, past the %d-byte row: %w", where, end, b.RowBytes, ErrLayout)
			}
			l.ropeBuf = append(l.ropeBuf, i)
		}
		size := int64(b.RowBytes) * int64(s.Slots)
		spans = append(spans, span{b.Offset, b.Offset + size, i})
		l.rowSum += b.RowBytes
		l.size = max(l.size, b.Offset+size)
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].lo < spans[b].lo })
	for k := 1; k < len(spans); k++ {
		if spans[k].lo < spans[k-1].hi {
			return nil, fmt.Errorf("layout buffers %d and %d overlap: %w", spans[k-1].i, spans[k].i, ErrLayout)
		}
	}
	return l, nil
}

// Spec returns a copy of the spec l was built from.
func (l *Layout) Spec() LayoutSpec {
	s := l.spec
	s.Buffers = append([]BufferSpec(nil), s.Buffers...)
	return s
}

// DType is the element type.
func (l *Layout) DType() DType { return l.spec.DType }

// Slots is the number of token slots in every buffer.
func (l *Layout) Slots() int { return l.spec.Slots }

// NumBuffers is the number of buffers.
func (l *Layout) NumBuffers() int { return len(l.spec.Buffers) }

// Buffer returns buffer i's spec.
func (l *Layout) Buffer(i int) BufferSpec { return l.spec.Buffers[i] }

// Rotary is the compiled RoPE config (nil when no buffer carries RoPE).
func (l *Layout) Rotary() *rope.Rotary { return l.rotary }

// ArenaBytes is the smallest arena that holds every buffer.
func (l *Layout) ArenaBytes() int64 { return l.size }

// SlotBytes is the number of bytes one slot spans across all buffers.
func (l *Layout) SlotBytes() int { return l.rowSum }

// RopeBytesPerSlot is the number of RoPE-slice bytes one slot holds.
func (l *Layout) RopeBytesPerSlot() int {
	n := 0
	for _, i := range l.ropeBuf {
		n += l.spec.Buffers[i].Rope.Heads * l.spec.Rope.Dim * l.spec.DType.Size()
	}
	return n
}

// compatible reports whether rows of l and o can be copied one to one.
func (l *Layout) compatible(o *Layout) error {
	if l == o {
		return nil
	}
	if l.spec.DType != o.spec.DType || len(l.spec.Buffers) != len(o.spec.Buffers) {
		return fmt.Errorf("layouts differ: %v x %d buffers vs %v x %d buffers: %w", l.spec.DType, len(l.spec.Buffers), o.spec.DType, len(o.spec.Buffers), ErrLayout)
	}
	for i := range l.spec.Buffers {
		if l.spec.Buffers[i].RowBytes != o.spec.Buffers[i].RowBytes {
			return fmt.Errorf("layouts differ at buffer %d: row bytes %d vs %d: %w", i, l.spec.Buffers[i].RowBytes, o.spec.Buffers[i].RowBytes, ErrLayout)
		}
	}
	return nil
}
