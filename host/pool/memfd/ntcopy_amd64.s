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
