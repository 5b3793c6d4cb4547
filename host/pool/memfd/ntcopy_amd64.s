#include "textflag.h"

// func copyNT(dst, src *byte, n int)
// Copies n bytes (a multiple of 128, dst 32-byte aligned) with streaming
// stores, then fences so the stores are visible before the page is handed
// on.
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX
	JZ   done

loop:
	VMOVDQU  0(SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ     $128, SI
	ADDQ     $128, DI
	DECQ     CX
	JNZ      loop

done:
	SFENCE
	VZEROUPPER
	RET

// func copyNT4(d *[4]*byte, s *[4]*byte, n int)
// Copies four runs of n bytes (a multiple of 128; every destination 32-byte
// aligned) at once, s[k] to d[k], a cache line of each per iteration, with
// streaming stores. Four streams keep more loads in flight than one: a
// layer-major page's segments lie megabytes apart, and one segment at a
// time waits on each run's first misses (segcopy.go).
TEXT ·copyNT4(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), AX
	MOVQ s+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ 0(AX), DI
	MOVQ 8(AX), R8
	MOVQ 16(AX), R11
	MOVQ 24(AX), R12
	MOVQ 0(BX), SI
	MOVQ 8(BX), DX
	MOVQ 16(BX), R9
	MOVQ 24(BX), R10
	SHRQ $7, CX
	JZ   done4

loop4:
	VMOVDQU  0(SI), Y0
	VMOVDQU  32(SI), Y1
	VMOVDQU  64(SI), Y2
	VMOVDQU  96(SI), Y3
	VMOVDQU  0(DX), Y4
	VMOVDQU  32(DX), Y5
	VMOVDQU  64(DX), Y6
	VMOVDQU  96(DX), Y7
	VMOVDQU  0(R9), Y8
	VMOVDQU  32(R9), Y9
	VMOVDQU  64(R9), Y10
	VMOVDQU  96(R9), Y11
	VMOVDQU  0(R10), Y12
	VMOVDQU  32(R10), Y13
	VMOVDQU  64(R10), Y14
	VMOVDQU  96(R10), Y15
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	VMOVNTDQ Y4, 0(R8)
	VMOVNTDQ Y5, 32(R8)
	VMOVNTDQ Y6, 64(R8)
	VMOVNTDQ Y7, 96(R8)
	VMOVNTDQ Y8, 0(R11)
	VMOVNTDQ Y9, 32(R11)
	VMOVNTDQ Y10, 64(R11)
	VMOVNTDQ Y11, 96(R11)
	VMOVNTDQ Y12, 0(R12)
	VMOVNTDQ Y13, 32(R12)
	VMOVNTDQ Y14, 64(R12)
	VMOVNTDQ Y15, 96(R12)
	ADDQ     $128, SI
	ADDQ     $128, DX
	ADDQ     $128, R9
	ADDQ     $128, R10
	ADDQ     $128, DI
	ADDQ     $128, R8
	ADDQ     $128, R11
	ADDQ     $128, R12
	DECQ     CX
	JNZ      loop4

done4:
	SFENCE
	VZEROUPPER
	RET
