package memfd

import "golang.org/x/sys/cpu"

// copyNT copies n bytes with non-temporal stores: n a multiple of 128, dst
// aligned to 32 bytes, AVX2 present (checked by segmentCopy).
//
//go:noescape
func copyNT(dst, src *byte, n int)

// copyNT4 copies s[k] to d[k] for k < 4, n bytes each (a multiple of 128,
// every d[k] aligned to 32 bytes, AVX2 present), the four interleaved.
//
//go:noescape
func copyNT4(d, s *[4]*byte, n int)

var streamingStores = cpu.X86.HasAVX2 && !raceEnabled
