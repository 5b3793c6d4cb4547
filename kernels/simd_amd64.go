package kernels

import (
	"golang.org/x/sys/cpu"
)

// The AVX2 kernels (simd_amd64.s) need AVX2 for the integer work on bf16
// and F16C for fp16 conversion; x/sys/cpu reports AVX2 only where the OS
// saves the YMM registers. They use separate VMULPS and VADDPS/VSUBPS, never
// FMA, so they reproduce the scalar kernels bit for bit.
var (
	simdSupported = cpu.X86.HasAVX2 && cpu.X86.HasF16C
	simdName      = "avx2"
)

// Each kernel rotates the rows of a rotBatch: the first n elements
// (interleaved) or pairs (half-split) of every head. count, heads and n are
// positive, n a multiple of the kernel's step (rotateSIMD).

//go:noescape
func rotF32HalfAVX2(b *rotBatch)

//go:noescape
func rotF32InterAVX2(b *rotBatch)

//go:noescape
func rotBF16HalfAVX2(b *rotBatch)

//go:noescape
func rotBF16InterAVX2(b *rotBatch)

//go:noescape
func rotF16HalfAVX2(b *rotBatch)

//go:noescape
func rotF16InterAVX2(b *rotBatch)

// vectorTableWidth is the number of table entries per Δ the vector kernel
// k reads for half pairs per head.
func vectorTableWidth(k rowKernel, half int) int {
	if k == kF32Inter || k == kF16Inter {
		return 2 * half
	}
	return half
}

// vectorTables lays out one Δ's cos and sin (pair order) as kernel k reads
// them:
//
//   - fp32/fp16 half-split, bf16 interleaved: cos and sin as they are.
//   - fp32/fp16 interleaved: a = [c0 s0 c1 s1 ...], b = [−s0 c0 −s1 c1 ...],
//     so the kernel rotates pairs in place without deinterleaving:
//     out = dup(x)·a + dup(y)·b. The even lane is x·c + y·(−s), equal to
//     x·c − y·s bit for bit (negation is exact and a − b ≡ a + (−b)), and
//     the x product is the first operand in both lanes, as in the scalar
//     kernels, so even NaN payloads agree.
//   - bf16 half-split: each block of 16 pairs as its 8 even pairs then its
//     8 odd pairs, the order in which the kernel splits 16 packed bf16 into
//     two float32 vectors (shift and mask, no shuffles); entries past the
//     last full block are never read by the vector loop.
func vectorTables(k rowKernel, cos, sin, a, b []float32) {
	switch k {
	case kF32Inter, kF16Inter:
		for i, c := range cos {
			s := sin[i]
			a[2*i], a[2*i+1] = c, s
			b[2*i], b[2*i+1] = -s, c
		}
	case kBF16Half:
		copy(a, cos)
		copy(b, sin)
		for blk := 0; blk+16 <= len(cos); blk += 16 {
			for j := 0; j < 8; j++ {
				a[blk+j], a[blk+8+j] = cos[blk+2*j], cos[blk+2*j+1]
				b[blk+j], b[blk+8+j] = sin[blk+2*j], sin[blk+2*j+1]
			}
		}
	default:
		copy(a, cos)
		copy(b, sin)
	}
}

// rotateSIMD rotates what the vector kernels can of every row of rb, for
// half pairs per head, and returns the number of pairs per head done;
// rotateGeneric finishes the rest.
func rotateSIMD(k rowKernel, rb *rotBatch, half int) int {
	var pairs int
	switch k {
	case kF32Half, kF16Half:
		pairs = half &^ 7 // 8 pairs per step
		rb.n = pairs
	case kBF16Half:
		pairs = half &^ 15 // 16 pairs per step
		rb.n = pairs
	case kF32Inter, kF16Inter:
		pairs = half &^ 3 // 8 elements, 4 pairs per step
		rb.n = 2 * pairs
	case kBF16Inter:
		pairs = half &^ 7 // 16 elements, 8 pairs per step
		rb.n = 2 * pairs
	}
	if pairs == 0 {
		return 0
	}
	switch k {
	case kF32Inter:
		rotF32InterAVX2(rb)
	case kBF16Inter:
		rotBF16InterAVX2(rb)
	case kF16Inter:
		rotF16InterAVX2(rb)
	case kF32Half:
		rb.hi = uintptr(half) * 4
		rotF32HalfAVX2(rb)
	case kBF16Half:
		rb.hi = uintptr(half) * 2
		rotBF16HalfAVX2(rb)
	case kF16Half:
		rb.hi = uintptr(half) * 2
		rotF16HalfAVX2(rb)
	}
	return pairs
}
