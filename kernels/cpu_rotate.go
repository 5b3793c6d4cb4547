package kernels

import (
	"unsafe"
)

// The scalar kernels below are the reference semantics every vector kernel
// must reproduce bit for bit. Each rotated pair is
//
//	x' = float32(x·c) − float32(y·s),  y' = float32(x·s) + float32(y·c)
//
// The explicit conversions forbid the compiler from fusing into FMA (Go
// spec, "Arithmetic operators"), which keeps results identical on every CPU
// and equal to the CUDA kernels, which use __fmul_rn/__fadd_rn for the same
// reason. bf16/fp16 are widened exactly and narrowed with round to nearest
// even (F32ToBF16, F32ToF16).
//
// y' is written x·s − y·(−c): the same value bit for bit (negation is exact
// and a + b ≡ a − (−b)), but a subtraction fixes its operand order where an
// addition leaves it to the compiler's register allocation. That order
// decides which payload survives when both products are NaN; the contract
// is that the x product is the first operand in both lanes (the hardware
// then keeps its NaN), which the vector kernels follow too.
//
// Each kernel rotates pairs [from, pairs) of heads slices that start stride
// bytes apart at p; from > 0 finishes what a vector kernel left (its tail).
// The layout was validated and the arena checked against it, so every slice
// is in bounds and element-aligned.

// rotateGeneric runs kernel k in plain Go, with cos and sin per pair.
func rotateGeneric(k rowKernel, p unsafe.Pointer, heads int, stride uintptr, cos, sin []float32, from int) {
	pairs := len(cos)
	if from >= pairs {
		return
	}
	for h := 0; h < heads; h++ {
		q := unsafe.Add(p, uintptr(h)*stride)
		switch k {
		case kF32Half:
			rotF32Half(unsafe.Slice((*float32)(q), 2*pairs), cos, sin, from)
		case kF32Inter:
			rotF32Inter(unsafe.Slice((*float32)(q), 2*pairs), cos, sin, from)
		case kBF16Half:
			rotBF16Half(unsafe.Slice((*uint16)(q), 2*pairs), cos, sin, from)
		case kBF16Inter:
			rotBF16Inter(unsafe.Slice((*uint16)(q), 2*pairs), cos, sin, from)
		case kF16Half:
			rotF16Half(unsafe.Slice((*uint16)(q), 2*pairs), cos, sin, from)
		case kF16Inter:
			rotF16Inter(unsafe.Slice((*uint16)(q), 2*pairs), cos, sin, from)
		case kE4M3Half:
			rotFP8Half(unsafe.Slice((*uint8)(q), 2*pairs), cos, sin, from, e4m3Wide, fmtE4M3)
		case kE4M3Inter:
			rotFP8Inter(unsafe.Slice((*uint8)(q), 2*pairs), cos, sin, from, e4m3Wide, fmtE4M3)
		case kE5M2Half:
			rotFP8Half(unsafe.Slice((*uint8)(q), 2*pairs), cos, sin, from, e5m2Wide, fmtE5M2)
		case kE5M2Inter:
			rotFP8Inter(unsafe.Slice((*uint8)(q), 2*pairs), cos, sin, from, e5m2Wide, fmtE5M2)
		}
	}
}

// Half-split: v = [x_0 .. x_{h-1} | y_0 .. y_{h-1}], cos/sin of h pairs.

func rotF32Half(v, cos, sin []float32, from int) {
	h := len(cos)
	lo, hi, sin := v[:h], v[h:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := lo[i], hi[i]
		lo[i] = float32(x*c) - float32(y*s)
		hi[i] = float32(x*s) - float32(y*-c)
	}
}

func rotBF16Half(v []uint16, cos, sin []float32, from int) {
	h := len(cos)
	lo, hi, sin := v[:h], v[h:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := BF16ToF32(lo[i]), BF16ToF32(hi[i])
		lo[i] = F32ToBF16(float32(x*c) - float32(y*s))
		hi[i] = F32ToBF16(float32(x*s) - float32(y*-c))
	}
}

func rotF16Half(v []uint16, cos, sin []float32, from int) {
	h := len(cos)
	lo, hi, sin := v[:h], v[h:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := f16Widen(lo[i]), f16Widen(hi[i])
		lo[i] = F32ToF16(float32(x*c) - float32(y*s))
		hi[i] = F32ToF16(float32(x*s) - float32(y*-c))
	}
}

// Interleaved: v = [x_0 y_0 x_1 y_1 ...].

func rotF32Inter(v, cos, sin []float32, from int) {
	h := len(cos)
	v, sin = v[:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := v[2*i], v[2*i+1]
		v[2*i] = float32(x*c) - float32(y*s)
		v[2*i+1] = float32(x*s) - float32(y*-c)
	}
}

func rotBF16Inter(v []uint16, cos, sin []float32, from int) {
	h := len(cos)
	v, sin = v[:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := BF16ToF32(v[2*i]), BF16ToF32(v[2*i+1])
		v[2*i] = F32ToBF16(float32(x*c) - float32(y*s))
		v[2*i+1] = F32ToBF16(float32(x*s) - float32(y*-c))
	}
}

func rotF16Inter(v []uint16, cos, sin []float32, from int) {
	h := len(cos)
	v, sin = v[:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := f16Widen(v[2*i]), f16Widen(v[2*i+1])
		v[2*i] = F32ToF16(float32(x*c) - float32(y*s))
		v[2*i+1] = F32ToF16(float32(x*s) - float32(y*-c))
	}
}
