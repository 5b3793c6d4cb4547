package memfd

import "golang.org/x/sys/cpu"

// copyNT copies n bytes with non-temporal stores: n a multiple of 128, dst
// aligned to 32 bytes, AVX2 present (checked by segmentCopy).
//
//go:noescape
func copyNT(dst, src *byte, n int)

var streamingStores = cpu.X86.HasAVX2 && !raceEnabled
