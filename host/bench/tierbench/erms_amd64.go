package tierbench

import "golang.org/x/sys/cpu"

// copyERMS copies n bytes from src to dst with REP MOVSB.
//
//go:noescape
func copyERMS(dst, src *byte, n int)

// hasERMS: the CPU copies fast with REP MOVSB (ERMS: AMD Zen, Intel since
// Ivy Bridge), the path C memcpy implementations take for large copies.
var hasERMS = cpu.X86.HasERMS
