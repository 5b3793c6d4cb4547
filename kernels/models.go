package kernels

import (
	"fmt"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// GQASpec lays out a grouped-query-attention model: per layer a K buffer
// and a V buffer of kvHeads×headDim elements per row, packed back to back in
// layer order (L0.K, L0.V, L1.K, ...). The RoPE slice of each K head is its
// first cfg.Dim elements (partial rotary when cfg.Dim < headDim).
func GQASpec(dtype DType, slots, layers, kvHeads, headDim int, cfg rope.Config) LayoutSpec {
	esz := dtype.Size()
	row := kvHeads * headDim * esz
	s := LayoutSpec{DType: dtype, Slots: slots, Rope: cfg}
	var off int64
	for l := 0; l < layers; l++ {
		s.Buffers = append(s.Buffers,
			BufferSpec{Name: fmt.Sprintf("L%d.K", l), Offset: off, RowBytes: row,
				Rope: &RopeSlice{Offset: 0, Heads: kvHeads, HeadStride: headDim * esz}},
			BufferSpec{Name: fmt.Sprintf("L%d.V", l), Offset: off + int64(row)*int64(slots), RowBytes: row})
		off += 2 * int64(row) * int64(slots)
	}
	return s
}

// MLASpec lays out a multi-head-latent-attention model (DeepSeek): per
// layer one fused buffer whose row is [kv_c (kvLoraRank) | k_pe (cfg.Dim)],
// the RoPE slice being k_pe, one head.
func MLASpec(dtype DType, slots, layers, kvLoraRank int, cfg rope.Config) LayoutSpec {
	esz := dtype.Size()
	row := (kvLoraRank + cfg.Dim) * esz
	s := LayoutSpec{DType: dtype, Slots: slots, Rope: cfg}
	for l := 0; l < layers; l++ {
		s.Buffers = append(s.Buffers, BufferSpec{Name: fmt.Sprintf("L%d.KV", l), Offset: int64(l) * int64(row) * int64(slots), RowBytes: row,
			Rope: &RopeSlice{Offset: kvLoraRank * esz, Heads: 1, HeadStride: cfg.Dim * esz}})
	}
	return s
}
