// Package enginewire holds the parts of the engine protocol
// that both sides must compute identically and that gRPC does not carry:
// the byte geometry of a registered KV layout (so an engine can find a row
// in the arenas it maps), the descriptor side channel's message format, and
// the request's ephemeral cache_control in its Anthropic and nvext forms.
//
// It is pure Go with no host imports, so engine clients in sdk/ and the host
// share one definition; the host checks in its tests that this geometry
// matches its own pools byte for byte.
package enginewire

import (
	"errors"
	"fmt"
)

// ErrLayout is wrapped by every layout validation error.
var ErrLayout = errors.New("invalid engine layout")

// Arrangement names how an arena places its pages: "page_major" (a page is
// contiguous, in canonical order) or "layer_major" (one tensor per layer and
// buffer, [slots·page_size, heads, head_dim]).
type Arrangement string

const (
	PageMajor  Arrangement = "page_major"
	LayerMajor Arrangement = "layer_major"
)

// Buffer is one per-layer KV buffer.
type Buffer struct {
	Name    string
	Heads   int
	HeadDim int
}

// RopeSlice says which elements of each head of the key buffer are rotated.
type RopeSlice struct {
	Buffer int
	Offset int
	Dim    int
	// Style is "interleaved" or "half_split".
	Style string
}

// Layout is the byte shape of a model's KV cache as the engine registers it.
type Layout struct {
	Model    string
	PageSize int
	// DType is fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2.
	DType   string
	Layers  int
	Buffers []Buffer
	Rope    *RopeSlice
}

// DTypeSize is the element size in bytes of a dtype name (the spellings the
// host accepts), or 0 when it is unknown.
func DTypeSize(name string) int {
	switch name {
	case "fp32", "float32":
		return 4
	case "bf16", "bfloat16", "fp16", "float16", "half":
		return 2
	case "fp8", "fp8_e4m3", "fp8_e5m2":
		return 1
	}
	return 0
}

// Validate checks the geometry this package computes with; the host checks
// the rest (limits, names) at Register.
func (l *Layout) Validate() error {
	switch {
	case l.PageSize < 1:
		return fmt.Errorf("%w: page_size %d", ErrLayout, l.PageSize)
	case DTypeSize(l.DType) == 0:
		return fmt.Errorf("%w: dtype %q", ErrLayout, l.DType)
	case l.Layers < 1:
		return fmt.Errorf("%w: layers %d", ErrLayout, l.Layers)
	case len(l.Buffers) == 0:
		return fmt.Errorf("%w: no buffers", ErrLayout)
	}
	for i, b := range l.Buffers {
		if b.Heads < 1 || b.HeadDim < 1 {
			return fmt.Errorf("%w: buffers[%d] %q: heads %d, head_dim %d", ErrLayout, i, b.Name, b.Heads, b.HeadDim)
		}
	}
	if r := l.Rope; r != nil {
		if r.Buffer < 0 || r.Buffer >= len(l.Buffers) {
			return fmt.Errorf("%w: rope buffer %d of %d", ErrLayout, r.Buffer, len(l.Buffers))
		}
		if r.Dim < 2 || r.Dim%2 != 0 || r.Offset < 0 || r.Offset+r.Dim > l.Buffers[r.Buffer].HeadDim {
			return fmt.Errorf("%w: rope slice [%d, %d) in a head of %d", ErrLayout, r.Offset, r.Offset+r.Dim, l.Buffers[r.Buffer].HeadDim)
		}
		if r.Style != "interleaved" && r.Style != "half_split" {
			return fmt.Errorf("%w: rope style %q: want interleaved or half_split", ErrLayout, r.Style)
		}
	}
	return nil
}

// ElemBytes is the size of one element.
func (l *Layout) ElemBytes() int { return DTypeSize(l.DType) }

// RowBytes is the bytes one token occupies in buffer buf of one layer.
func (l *Layout) RowBytes(buf int) int {
	b := l.Buffers[buf]
	return b.Heads * b.HeadDim * l.ElemBytes()
}

// SegmentBytes is one (layer, buffer) segment of a page: PageSize rows.
func (l *Layout) SegmentBytes(buf int) int { return l.PageSize * l.RowBytes(buf) }

// LayerPageBytes is one layer's share of a page.
func (l *Layout) LayerPageBytes() int {
	n := 0
	for b := range l.Buffers {
		n += l.SegmentBytes(b)
	}
	return n
}

// PageBytes is one page in canonical order: for each layer, for each
// buffer, PageSize rows.
func (l *Layout) PageBytes() int { return l.Layers * l.LayerPageBytes() }

// PageSegmentOffset is where segment (layer, buf) starts in a canonical page.
func (l *Layout) PageSegmentOffset(layer, buf int) int64 {
	return l.ArenaSegmentOffset(PageMajor, 1, 0, layer, buf)
}

// ArenaSegmentOffset is where segment (layer, buf) of page slot starts in
// an arena of slots pages; the segment is contiguous in both arrangements.
func (l *Layout) ArenaSegmentOffset(arr Arrangement, slots, slot, layer, buf int) int64 {
	prior := 0
	for b := 0; b < buf; b++ {
		prior += l.SegmentBytes(b)
	}
	return SegmentOffset(arr == PageMajor, l.Layers, l.LayerPageBytes(), prior, l.SegmentBytes(buf), slots, slot, layer)
}

// SegmentOffset is the arrangements' offset math, the one definition the
// host's layout shares: where segment (layer, buf) of page slot starts in
// an arena of slots pages, given a layer's bytes of a page (layerBytes),
// the bytes of the buffers before buf in a layer (prior) and buf's
// segment (size). A page-major arena holds whole canonical pages back to
// back; a layer-major one holds, for each layer and buffer, every slot's
// segment back to back (the per-layer tensors an engine views).
func SegmentOffset(pageMajor bool, layers, layerBytes, prior, size, slots, slot, layer int) int64 {
	if pageMajor {
		return int64(slot)*int64(layers)*int64(layerBytes) + int64(layer)*int64(layerBytes) + int64(prior)
	}
	return int64(layer)*int64(slots)*int64(layerBytes) + int64(slots)*int64(prior) + int64(slot)*int64(size)
}
