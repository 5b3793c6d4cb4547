package kernels

import (
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// rotateRow rotates every head's RoPE slice of one row. The layout was
// validated and the arena checked against it, so every slice is in bounds
// and element-aligned.
//
// Each rotated pair is x' = float32(x·c) − float32(y·s),
// y' = float32(x·s) + float32(y·c): the explicit conversions forbid the
// compiler from fusing into FMA (Go spec, "Arithmetic operators"), which keeps
// results identical on every CPU and equal to the CUDA kernels, which use
// __fmul_rn/__fadd_rn for the same reason.
func rotateRow(mem []byte, l *Layout, b *BufferSpec, slot int, cos, sin []float32) {
	r := b.Rope
	dim := l.spec.Rope.Dim
	base := b.Offset + int64(slot)*int64(b.RowBytes) + int64(r.Offset)
	interleaved := l.spec.Rope.Pairing == rope.Interleaved
	for h := 0; h < r.Heads; h++ {
		p := unsafe.Pointer(&mem[base+int64(h*r.HeadStride)])
		switch l.spec.DType {
		case F32:
			v := unsafe.Slice((*float32)(p), dim)
			if interleaved {
				rotF32Interleaved(v, cos, sin)
			} else {
				rotF32HalfSplit(v, cos, sin)
			}
		case BF16:
			v := unsafe.Slice((*uint16)(p), dim)
			if interleaved {
				rotBF16Interleaved(v, cos, sin)
			} else {
				rotBF16HalfSplit(v, cos, sin)
			}
		case F16:
			v := unsafe.Slice((*uint16)(p), dim)
			t := f16ToF32Table()
			if interleaved {
				rotF16Interleaved(v, cos, sin, t)
			} else {
				rotF16HalfSplit(v, cos, sin, t)
			}
		}
	}
}

func rotF32Interleaved(v, cos, sin []float32) {
	sin = sin[:len(cos)]
	v = v[:2*len(cos)]
	for i, c := range cos {
		s := sin[i]
		x, y := v[2*i], v[2*i+1]
		v[2*i] = float32(x*c) - float32(y*s)
		v[2*i+1] = float32(x*s) + float32(y*c)
	}
}

func rotF32HalfSplit(v, cos, sin []float32) {
	h := len(cos)
	sin = sin[:h]
	lo, hi := v[:h], v[h:2*h]
	for i, c := range cos {
		s := sin[i]
		x, y := lo[i], hi[i]
		lo[i] = float32(x*c) - float32(y*s)
		hi[i] = float32(x*s) + float32(y*c)
	}
}

func rotBF16Interleaved(v []uint16, cos, sin []float32) {
	sin = sin[:len(cos)]
	v = v[:2*len(cos)]
	for i, c := range cos {
		s := sin[i]
		x, y := BF16ToF32(v[2*i]), BF16ToF32(v[2*i+1])
		v[2*i] = F32ToBF16(float32(x*c) - float32(y*s))
		v[2*i+1] = F32ToBF16(float32(x*s) + float32(y*c))
	}
}

func rotBF16HalfSplit(v []uint16, cos, sin []float32) {
	h := len(cos)
	sin = sin[:h]
	lo, hi := v[:h], v[h:2*h]
	for i, c := range cos {
		s := sin[i]
		x, y := BF16ToF32(lo[i]), BF16ToF32(hi[i])
		lo[i] = F32ToBF16(float32(x*c) - float32(y*s))
		hi[i] = F32ToBF16(float32(x*s) + float32(y*c))
	}
}

func rotF16Interleaved(v []uint16, cos, sin []float32, t *[1 << 16]float32) {
	sin = sin[:len(cos)]
	v = v[:2*len(cos)]
	for i, c := range cos {
		s := sin[i]
		x, y := t[v[2*i]], t[v[2*i+1]]
		v[2*i] = F32ToF16(float32(x*c) - float32(y*s))
		v[2*i+1] = F32ToF16(float32(x*s) + float32(y*c))
	}
}

func rotF16HalfSplit(v []uint16, cos, sin []float32, t *[1 << 16]float32) {
	h := len(cos)
	sin = sin[:h]
	lo, hi := v[:h], v[h:2*h]
	for i, c := range cos {
		s := sin[i]
		x, y := t[lo[i]], t[hi[i]]
		lo[i] = F32ToF16(float32(x*c) - float32(y*s))
		hi[i] = F32ToF16(float32(x*s) + float32(y*c))
	}
}
