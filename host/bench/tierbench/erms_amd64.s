#include "textflag.h"

// func copyERMS(dst, src *byte, n int)
// Copies n bytes with one REP MOVSB: on CPUs with ERMS/FSRM the microcode
// string copy that C memcpy implementations use for large copies.
TEXT ·copyERMS(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CLD
	REP; MOVSB
	RET
