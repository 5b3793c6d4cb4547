// Package layout describes how one model's KV cache is shaped in bytes, so
// that pools can size themselves, pages can be copied between tiers without
// interpretation, and kernels know where the RoPE slice of a key sits.
//
// A Layout is registered per model by the engine. Its
// Fingerprint, a stable hash of the canonical descriptor, travels with every
// page that leaves the process (disk headers, remote object names), so pages
// of different models or shapes never mix.
//
// A page holds PageSize tokens. Its canonical byte order, the one every
// tier stores and the mover copies, is layer-major: for each layer, for each
// buffer, PageSize rows of that buffer. A row is Heads×HeadDim elements of
// DType. Arenas the engine maps may arrange pages differently (see
// Arrangement); ReadPage and WritePage convert to the canonical order.
package layout

import (
	"errors"
	"fmt"
)

// Limits keep a malformed registration from asking for absurd memory or
// overflowing offsets. They are far above any real model.
const (
	MaxModelName  = 256
	MaxPageSize   = 4096
	MaxLayers     = 1024
	MaxBuffers    = 8
	MaxHeads      = 1024
	MaxHeadDim    = 1 << 16
	MaxPageBytes  = 1 << 31
	MaxBufferName = 32
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid layout")

// Buffer is one per-layer KV buffer: K, V, or MLA's fused [kv_c | k_pe] row.
type Buffer struct {
	// Name is informational ("k", "v", "kv"); it is part of the fingerprint.
	Name string `json:"name"`
	// Heads is the number of KV heads stored per token (1 for MLA).
	Heads int `json:"heads"`
	// HeadDim is the number of elements per head (576 = 512+64 for MLA).
	HeadDim int `json:"head_dim"`
}

// RowElems is the number of elements one token occupies in this buffer.
func (b Buffer) RowElems() int { return b.Heads * b.HeadDim }

// RopeSlice says which elements of each head are rotated by RoPE. Splice
// rotates only these; everything else in a row stays bit-identical.
type RopeSlice struct {
	// Buffer is the index in Layout.Buffers of the buffer holding keys.
	Buffer int `json:"buffer"`
	// Offset is the first rotated element within each head.
	Offset int `json:"offset"`
	// Dim is the number of rotated elements per head; it is even.
	Dim int `json:"dim"`
	// Style is how rotated elements pair up.
	Style RopeStyle `json:"style"`
}

// Layout is the byte shape of one model's KV cache.
type Layout struct {
	Model    string   `json:"model"`
	PageSize int      `json:"page_size"`
	DType    DType    `json:"dtype"`
	Layers   int      `json:"layers"`
	Buffers  []Buffer `json:"buffers"`
	// Rope is nil for a model without a rotary slice in its keys; such a
	// layout can be cached and moved but not spliced with rotation.
	Rope *RopeSlice `json:"rope,omitempty"`
}

// MHA returns the layout of a multi-head (or grouped-query) attention model
// with separate K and V buffers of kvHeads×headDim, whose keys carry a RoPE
// slice of ropeDim elements at the start of each head (ropeDim = headDim for
// full rotary, less for partial rotary, 0 for none).
func MHA(model string, pageSize int, dt DType, layers, kvHeads, headDim, ropeDim int, style RopeStyle) Layout {
	l := Layout{
		Model: model, PageSize: pageSize, DType: dt, Layers: layers,
		Buffers: []Buffer{{Name: "k", Heads: kvHeads, HeadDim: headDim}, {Name: "v", Heads: kvHeads, HeadDim: headDim}},
	}
	if ropeDim > 0 {
		l.Rope = &RopeSlice{Buffer: 0, Offset: 0, Dim: ropeDim, Style: style}
	}
	return l
}

// MLA returns the layout of a multi-head latent attention model (DeepSeek):
// one fused row per token per layer, [kv_c | k_pe], with the RoPE slice k_pe
// after the compressed latent kv_c. The pairing of k_pe is the engine's to
// declare: DeepSeek-V2-style caches store it interleaved, pairs (2i, 2i+1);
// transformers' DeepSeek-V3 cache stores it de-interleaved, pairs (i, i+d/2),
// which is HalfSplit.
func MLA(model string, pageSize int, dt DType, layers, kvLoraRank, ropeDim int, style RopeStyle) Layout {
	return Layout{
		Model: model, PageSize: pageSize, DType: dt, Layers: layers,
		Buffers: []Buffer{{Name: "kv", Heads: 1, HeadDim: kvLoraRank + ropeDim}},
		Rope:    &RopeSlice{Buffer: 0, Offset: kvLoraRank, Dim: ropeDim, Style: style},
	}
}

// Validate reports the first problem with l, naming the field.
func (l *Layout) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case l.Model == "":
		return bad("model name is empty")
	case len(l.Model) > MaxModelName:
		return bad("model name is %d bytes, the limit is %d", len(l.Model), MaxModelName)
	case l.PageSize < 1 || l.PageSize > MaxPageSize:
		return bad("page_size %d is outside 1..%d", l.PageSize, MaxPageSize)
	case !l.DType.Valid():
		return bad("dtype %v is not one of fp32, bf16, fp16, fp8_e4m3, fp8_e5m2", l.DType)
	case l.Layers < 1 || l.Layers > MaxLayers:
		return bad("layers %d is outside 1..%d", l.Layers, MaxLayers)
	case len(l.Buffers) < 1 || len(l.Buffers) > MaxBuffers:
		return bad("%d buffers per layer, want 1..%d (K and V, or one fused MLA row)", len(l.Buffers), MaxBuffers)
	}
	seen := make(map[string]bool, len(l.Buffers))
	for i, b := range l.Buffers {
		switch {
		case b.Name == "" || len(b.Name) > MaxBufferName:
			return bad("buffers[%d].name %q must be 1..%d bytes", i, b.Name, MaxBufferName)
		case seen[b.Name]:
			return bad("buffers[%d].name %q is used twice", i, b.Name)
		case b.Heads < 1 || b.Heads > MaxHeads:
			return bad("buffers[%d] (%s).heads %d is outside 1..%d", i, b.Name, b.Heads, MaxHeads)
		case b.HeadDim < 1 || b.HeadDim > MaxHeadDim:
			return bad("buffers[%d] (%s).head_dim %d is outside 1..%d", i, b.Name, b.HeadDim, MaxHeadDim)
		}
		seen[b.Name] = true
	}
	// Checked in int64 so that an overflowing product is caught, not wrapped.
	var perToken int64
	for _, b := range l.Buffers {
		perToken += int64(b.Heads) * int64(b.HeadDim) * int64(l.DType.Size())
	}
	if pb := perToken * int64(l.Layers) * int64(l.PageSize); pb > MaxPageBytes {
		return bad("a page would be %d bytes, the limit is %d; use a smaller page_size", pb, int64(MaxPageBytes))
	}
	if r := l.Rope; r != nil {
		if r.Buffer < 0 || r.Buffer >= len(l.Buffers) {
			return bad("rope.buffer %d is not a buffer index (0..%d)", r.Buffer, len(l.Buffers)-1)
		}
		hd := l.Buffers[r.Buffer].HeadDim
		switch {
		case r.Dim < 2 || r.Dim%2 != 0:
			return bad("rope.dim %d must be even and at least 2", r.Dim)
		case r.Offset < 0 || r.Offset+r.Dim > hd:
			return bad("rope slice [%d, %d) does not fit in a head of %d elements of buffer %q",
				r.Offset, r.Offset+r.Dim, hd, l.Buffers[r.Buffer].Name)
		case !r.Style.Valid():
			return bad("rope.style %v is not interleaved or half_split", r.Style)
		}
	}
	return nil
}

// RowBytes is the number of bytes one token occupies in buffer buf of one layer.
func (l *Layout) RowBytes(buf int) int { return l.Buffers[buf].RowElems() * l.DType.Size() }

// SegmentBytes is the size of one (layer, buffer) segment of a page:
// PageSize rows of that buffer.
func (l *Layout) SegmentBytes(buf int) int { return l.PageSize * l.RowBytes(buf) }

// TokenBytes is the number of bytes one token occupies over all layers and buffers.
func (l *Layout) TokenBytes() int {
	n := 0
	for i := range l.Buffers {
		n += l.RowBytes(i)
	}
	return n * l.Layers
}

// LayerPageBytes is the size of one layer's share of a page (all buffers).
func (l *Layout) LayerPageBytes() int {
	n := 0
	for i := range l.Buffers {
		n += l.SegmentBytes(i)
	}
	return n
}

// PageBytes is the size of one page in every tier.
func (l *Layout) PageBytes() int { return l.LayerPageBytes() * l.Layers }

// Clone returns a deep copy, so a registered layout cannot be changed by
// the caller that registered it.
func (l *Layout) Clone() *Layout {
	c := *l
	c.Buffers = append([]Buffer(nil), l.Buffers...)
	if l.Rope != nil {
		r := *l.Rope
		c.Rope = &r
	}
	return &c
}

// String is a one-line summary for logs.
func (l *Layout) String() string {
	return fmt.Sprintf("%s page=%d %s layers=%d buffers=%d page_bytes=%d fp=%s",
		l.Model, l.PageSize, l.DType, l.Layers, len(l.Buffers), l.PageBytes(), l.Fingerprint())
}
