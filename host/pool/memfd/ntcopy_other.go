//go:build !amd64

package memfd

func copyNT(dst, src *byte, n int) { panic("memfd: streaming stores need amd64") }

func copyNT4(d, s *[4]*byte, n int) { panic("memfd: streaming stores need amd64") }

const streamingStores = false
