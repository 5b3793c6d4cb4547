#include "go_asm.h"
#include "textflag.h"

// AVX2 + F16C RoPE Δ-rotation kernels; see simd_amd64.go for the contract
// and vectorTables for the table layouts. Products and sums are separate
// VMULPS and VADDPS/VSUBPS (no FMA), and in every sum or difference the x
// product is the first source operand (Go's VADDPS b, a, d computes a + b
// with a first), as in the scalar code, so results match it bit for bit,
// NaN payloads included: x86 returns the first source's NaN when both are.
//
// Registers: R13 the rotBatch, R12 its row, DI head base, CX heads left,
// DX stride, R8/R9 the row's tables, R10 n, R11 y-half offset, SI y-half
// base, AX element or pair index, BX scratch.

// BF16_CONSTS loads the constants of the bf16 kernels into Y8, Y9 and Y13.
#define BF16_CONSTS \
	MOVL $1, BX; VMOVD BX, X8; VPBROADCASTD X8, Y8; \
	MOVL $0x7fff, BX; VMOVD BX, X9; VPBROADCASTD X9, Y9; \
	MOVL $0xffff0000, BX; VMOVD BX, X13; VPBROADCASTD X13, Y13

// The bf16 kernels never shuffle: 16 packed bf16 (one 32-byte load) split
// into two float32 vectors by a shift (even elements: dword << 16) and a
// mask (odd elements: dword & 0xffff0000), and two rounded float32 vectors
// merge back the same way. Interleaved pairs come out deinterleaved for
// free (even = x, odd = y); half-split rows use tables in even/odd order.

// ROUND_BF16 rounds the float32 lanes of in to bf16 in the high word of
// each lane of t, as F32ToBF16: b + 0x7fff + ((b>>16)&1). The low word of t
// is garbage.
//
// F32ToBF16 sends a NaN to (b>>16)|0x40 instead; here that is what the
// rounding gives already, for every NaN a rotation can produce, so no test
// for NaN is spent per lane. The input lanes are sums and differences of
// products of a widened bf16 (low 16 bits zero) and a finite table value,
// and x86 arithmetic (SDM vol. 1, 4.8.3.5) returns either an operand's NaN
// with its payload kept and the quiet bit (0x00400000) set, or the default
// NaN 0xffc00000. So every NaN here has low 16 bits zero and the quiet bit:
// adding at most 0x8000 cannot carry into the high word, which is already
// (b>>16)|0x40. TestKernelsMatchOracleBitForBit feeds NaNs of every kind
// (and ∞·0) through the kernels; TestVectorNarrowingMatchesScalar checks
// the rounding alone on every other input.
#define ROUND_BF16(in, t) \
	VPSRLD $16, in, t; \
	VPAND Y8, t, t; \
	VPADDD Y9, t, t; \
	VPADDD in, t, t

// MERGE_BF16 packs the rounded even lanes (high words of e) and odd lanes
// (high words of o) into e: dword k = o_k's bf16 << 16 | e_k's bf16.
#define MERGE_BF16(e, o) \
	VPSRLD $16, e, e; \
	VPBLENDW $0xaa, o, e, e

// F16_CONSTS loads the constants of NARROW_F16 into X14-X15.
#define F16_CONSTS \
	MOVL $0x7e00, BX; VMOVD BX, X14; VPBROADCASTW X14, X14; \
	MOVL $0xfe00, BX; VMOVD BX, X15; VPBROADCASTW X15, X15

// NARROW_F16 rounds the 8 float32 lanes of in to fp16 in xout, to nearest
// even (imm 0), as F32ToF16. The hardware keeps a NaN's payload (always
// with the quiet bit: 0x7e00-0x7fff, 0xfe00-0xffff); F32ToF16 (and the
// CUDA kernels) give sign|0x7e00. Two clamps do that and touch nothing
// else: a signed min with 0x7e00 catches positive NaNs only (negative
// halves are negative int16), an unsigned min with 0xfe00 negative NaNs
// only (every other half is below 0xfe00).
#define NARROW_F16(in, xout) \
	VCVTPS2PH $0, in, xout; \
	VPMINSW X14, xout, xout; \
	VPMINUW X15, xout, xout

// HALF_MATH: Y0 = x, Y1 = y, cos/sin at (R8)/(R9) index AX ->
// Y4 = x·c − y·s, Y6 = x·s + y·c.
#define HALF_MATH \
	VMOVUPS (R8)(AX*4), Y2; \
	VMOVUPS (R9)(AX*4), Y3; \
	VMULPS Y2, Y0, Y4; \
	VMULPS Y3, Y1, Y5; \
	VSUBPS Y5, Y4, Y4; \
	VMULPS Y3, Y0, Y6; \
	VMULPS Y2, Y1, Y7; \
	VADDPS Y7, Y6, Y6

// INTER_MATH: Y0 = [x0 y0 x1 y1 ...] -> Y1 = [x0' y0' x1' y1' ...]
// = dup(x)·[c s ...] + dup(y)·[−s c ...].
// INTER_MATH_AT does the same for in -> out with the tables off bytes on.
#define INTER_MATH \
	VMOVSLDUP Y0, Y1; \
	VMOVSHDUP Y0, Y2; \
	VMULPS (R8)(AX*4), Y1, Y1; \
	VMULPS (R9)(AX*4), Y2, Y2; \
	VADDPS Y2, Y1, Y1

#define INTER_MATH_AT(off, in, out, tmp) \
	VMOVSLDUP in, out; \
	VMOVSHDUP in, tmp; \
	VMULPS off(R8)(AX*4), out, out; \
	VMULPS off(R9)(AX*4), tmp, tmp; \
	VADDPS tmp, out, out

// ITEM_START begins row R12 of the rotBatch at R13: skip it when its Δ is
// 0; else point R8/R9 at its tables, DI at its first head, CX at the head
// count, and prefetch the RoPE extent of the row pfDist items ahead (see
// rotBatch): its first and last byte, and every 64 bytes between when it
// is longer than 128 (two lines, MLA's bf16 k_pe, take no loop).
#define ITEM_START(next, pfl, pfd) \
	MOVQ rotBatch_deltas(R13), BX; \
	CMPQ (BX)(R12*8), $0; \
	JEQ next; \
	MOVQ rotBatch_index(R13), BX; \
	MOVLQSX (BX)(R12*4), BX; \
	IMULQ rotBatch_tabLen(R13), BX; \
	MOVQ rotBatch_a(R13), R8; \
	ADDQ BX, R8; \
	MOVQ rotBatch_b(R13), R9; \
	ADDQ BX, R9; \
	MOVQ rotBatch_slots(R13), BX; \
	MOVQ (BX)(R12*8), DI; \
	IMULQ rotBatch_rowLen(R13), DI; \
	ADDQ rotBatch_base(R13), DI; \
	MOVQ rotBatch_heads(R13), CX; \
	MOVQ rotBatch_pfDist(R13), BX; \
	TESTQ BX, BX; \
	JZ pfd; \
	ADDQ R12, BX; \
	CMPQ BX, rotBatch_count(R13); \
	JAE pfd; \
	MOVQ rotBatch_slots(R13), AX; \
	MOVQ (AX)(BX*8), BX; \
	IMULQ rotBatch_rowLen(R13), BX; \
	ADDQ rotBatch_base(R13), BX; \
	MOVQ rotBatch_pfLen(R13), AX; \
	PREFETCHT0 (BX); \
	PREFETCHT0 -1(BX)(AX*1); \
	SUBQ $128, AX; \
	JLE pfd; \
pfl: \
	ADDQ $64, BX; \
	PREFETCHT0 (BX); \
	SUBQ $64, AX; \
	JG pfl; \
pfd:

// ENTRY loads the batch-wide values: R13 batch, DX stride, R10 n, R11 y-half
// offset, R12 = 0 (the row).
#define ENTRY \
	MOVQ b+0(FP), R13; \
	MOVQ rotBatch_stride(R13), DX; \
	MOVQ rotBatch_n(R13), R10; \
	MOVQ rotBatch_hi(R13), R11; \
	XORQ R12, R12

// NEXT_ITEM ends row R12 and loops to item while rows remain.
#define NEXT_ITEM(item) \
	INCQ R12; \
	CMPQ R12, rotBatch_count(R13); \
	JB item; \
	VZEROUPPER; \
	RET

// func rotF32HalfAVX2(b *rotBatch)
TEXT ·rotF32HalfAVX2(SB), NOSPLIT, $0-8
	ENTRY
f32h_item:
	ITEM_START(f32h_next, f32h_pfl, f32h_pfd)
f32h_head:
	XORQ AX, AX
	LEAQ (DI)(R11*1), SI
f32h_loop:
	VMOVUPS (DI)(AX*4), Y0
	VMOVUPS (SI)(AX*4), Y1
	HALF_MATH
	VMOVUPS Y4, (DI)(AX*4)
	VMOVUPS Y6, (SI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, R10
	JB   f32h_loop
	ADDQ DX, DI
	DECQ CX
	JNZ  f32h_head
f32h_next:
	NEXT_ITEM(f32h_item)

// func rotF32InterAVX2(b *rotBatch)
TEXT ·rotF32InterAVX2(SB), NOSPLIT, $0-8
	ENTRY
f32i_item:
	ITEM_START(f32i_next, f32i_pfl, f32i_pfd)
f32i_head:
	XORQ AX, AX
f32i_loop:
	VMOVUPS (DI)(AX*4), Y0
	INTER_MATH
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, R10
	JB   f32i_loop
	ADDQ DX, DI
	DECQ CX
	JNZ  f32i_head
f32i_next:
	NEXT_ITEM(f32i_item)

// func rotBF16HalfAVX2(b *rotBatch)
// 16 pairs per step: x and y are one 32-byte load each; the tables hold
// each block's 8 even pairs, then its 8 odd pairs.
TEXT ·rotBF16HalfAVX2(SB), NOSPLIT, $0-8
	ENTRY
	BF16_CONSTS
bf16h_item:
	ITEM_START(bf16h_next, bf16h_pfl, bf16h_pfd)
bf16h_head:
	XORQ AX, AX
	LEAQ (DI)(R11*1), SI
bf16h_loop:
	VMOVDQU (DI)(AX*2), Y0
	VMOVDQU (SI)(AX*2), Y1
	VPSLLD $16, Y0, Y2         // x, even pairs
	VPAND Y13, Y0, Y0          // x, odd pairs
	VPSLLD $16, Y1, Y3         // y, even pairs
	VPAND Y13, Y1, Y1          // y, odd pairs
	VMOVUPS (R8)(AX*4), Y14    // cos, even pairs
	VMOVUPS (R9)(AX*4), Y15    // sin, even pairs
	VMULPS Y14, Y2, Y4
	VMULPS Y15, Y3, Y5
	VSUBPS Y5, Y4, Y4          // x' even = x·c − y·s
	VMULPS Y15, Y2, Y5
	VMULPS Y14, Y3, Y2
	VADDPS Y2, Y5, Y5          // y' even = x·s + y·c
	VMOVUPS 32(R8)(AX*4), Y14  // cos, odd pairs
	VMOVUPS 32(R9)(AX*4), Y15  // sin, odd pairs
	VMULPS Y14, Y0, Y6
	VMULPS Y15, Y1, Y7
	VSUBPS Y7, Y6, Y6          // x' odd
	VMULPS Y15, Y0, Y7
	VMULPS Y14, Y1, Y0
	VADDPS Y0, Y7, Y7          // y' odd
	ROUND_BF16(Y4, Y0)
	ROUND_BF16(Y6, Y2)
	MERGE_BF16(Y0, Y2)
	ROUND_BF16(Y5, Y1)
	ROUND_BF16(Y7, Y2)
	MERGE_BF16(Y1, Y2)
	VMOVDQU Y0, (DI)(AX*2)
	VMOVDQU Y1, (SI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, R10
	JB   bf16h_loop
	ADDQ DX, DI
	DECQ CX
	JNZ  bf16h_head
bf16h_next:
	NEXT_ITEM(bf16h_item)

// func rotBF16InterAVX2(b *rotBatch)
// 8 pairs (16 elements) per step, one 32-byte load; pair k's cos/sin sit
// at index AX/2 + k, so the tables are addressed with scale 2.
TEXT ·rotBF16InterAVX2(SB), NOSPLIT, $0-8
	ENTRY
	BF16_CONSTS
bf16i_item:
	ITEM_START(bf16i_next, bf16i_pfl, bf16i_pfd)
bf16i_head:
	XORQ AX, AX
bf16i_loop:
	VMOVDQU (DI)(AX*2), Y0
	VPSLLD $16, Y0, Y1         // x
	VPAND Y13, Y0, Y0          // y
	VMOVUPS (R8)(AX*2), Y2     // cos
	VMOVUPS (R9)(AX*2), Y3     // sin
	VMULPS Y2, Y1, Y4
	VMULPS Y3, Y0, Y5
	VSUBPS Y5, Y4, Y4          // x' = x·c − y·s
	VMULPS Y3, Y1, Y6
	VMULPS Y2, Y0, Y7
	VADDPS Y7, Y6, Y6          // y' = x·s + y·c
	ROUND_BF16(Y4, Y5)
	ROUND_BF16(Y6, Y0)
	MERGE_BF16(Y5, Y0)
	VMOVDQU Y5, (DI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, R10
	JB   bf16i_loop
	ADDQ DX, DI
	DECQ CX
	JNZ  bf16i_head
bf16i_next:
	NEXT_ITEM(bf16i_item)

// func rotF16HalfAVX2(b *rotBatch)
TEXT ·rotF16HalfAVX2(SB), NOSPLIT, $0-8
	ENTRY
	F16_CONSTS
f16h_item:
	ITEM_START(f16h_next, f16h_pfl, f16h_pfd)
f16h_head:
	XORQ AX, AX
	LEAQ (DI)(R11*1), SI
f16h_loop:
	VCVTPH2PS (DI)(AX*2), Y0
	VCVTPH2PS (SI)(AX*2), Y1
	HALF_MATH
	NARROW_F16(Y4, X5)
	NARROW_F16(Y6, X0)
	VMOVDQU X5, (DI)(AX*2)
	VMOVDQU X0, (SI)(AX*2)
	ADDQ $8, AX
	CMPQ AX, R10
	JB   f16h_loop
	ADDQ DX, DI
	DECQ CX
	JNZ  f16h_head
f16h_next:
	NEXT_ITEM(f16h_item)

// func rotF16InterAVX2(b *rotBatch)
// 16 elements per step while they last (MLA's k_pe is 64), then one of 8.
TEXT ·rotF16InterAVX2(SB), NOSPLIT, $0-8
	ENTRY
	F16_CONSTS
f16i_item:
	ITEM_START(f16i_next, f16i_pfl, f16i_pfd)
f16i_head:
	XORQ AX, AX
	MOVQ R10, BX
	ANDQ $-16, BX
	JZ   f16i_one
f16i_loop:
	VCVTPH2PS (DI)(AX*2), Y0
	VCVTPH2PS 16(DI)(AX*2), Y8
	INTER_MATH_AT(0, Y0, Y1, Y2)
	INTER_MATH_AT(32, Y8, Y9, Y10)
	NARROW_F16(Y1, X3)
	NARROW_F16(Y9, X11)
	VMOVDQU X3, (DI)(AX*2)
	VMOVDQU X11, 16(DI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, BX
	JB   f16i_loop
f16i_one:
	CMPQ AX, R10
	JAE  f16i_done
	VCVTPH2PS (DI)(AX*2), Y0
	INTER_MATH_AT(0, Y0, Y1, Y2)
	NARROW_F16(Y1, X3)
	VMOVDQU X3, (DI)(AX*2)
f16i_done:
	ADDQ DX, DI
	DECQ CX
	JNZ  f16i_head
f16i_next:
	NEXT_ITEM(f16i_item)

// Test hooks: the conversions above on plain arrays (n a positive multiple
// of 16), so tests can compare them with F32ToBF16, F32ToF16 and F16ToF32
// on every input, not only on what rotation produces.

// func narrowBF16AVX2(dst *uint32, src *float32, n int)
// For each block of 16 inputs: dst[k] = bf16(src[8+k]) << 16 | bf16(src[k]).
TEXT ·narrowBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), R10
	BF16_CONSTS
	XORQ AX, AX
nbf16_loop:
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS 32(SI)(AX*4), Y1
	ROUND_BF16(Y0, Y2)
	ROUND_BF16(Y1, Y4)
	MERGE_BF16(Y2, Y4)
	VMOVDQU Y2, (DI)(AX*2)
	ADDQ $16, AX
	CMPQ AX, R10
	JB   nbf16_loop
	VZEROUPPER
	RET

// func narrowF16AVX2(dst *uint16, src *float32, n int)
TEXT ·narrowF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), R10
	F16_CONSTS
	XORQ AX, AX
nf16_loop:
	VMOVUPS (SI)(AX*4), Y0
	NARROW_F16(Y0, X1)
	VMOVDQU X1, (DI)(AX*2)
	ADDQ $8, AX
	CMPQ AX, R10
	JB   nf16_loop
	VZEROUPPER
	RET

// func widenF16AVX2(dst *float32, src *uint16, n int)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), R10
	XORQ AX, AX
wf16_loop:
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, R10
	JB   wf16_loop
	VZEROUPPER
	RET
