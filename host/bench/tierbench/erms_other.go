//go:build !amd64

package tierbench

func copyERMS(dst, src *byte, n int) { panic("tierbench: REP MOVSB needs amd64") }

const hasERMS = false
