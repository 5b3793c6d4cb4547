//go:build !amd64

package kernels

// No vector kernels on this architecture: the plain-Go ones run everywhere.
const (
	simdSupported = false
	simdName      = "generic"
)

func vectorTableWidth(rowKernel, int) int                                { return 0 }
func vectorTables(rowKernel, []float32, []float32, []float32, []float32) {}
func rotateSIMD(rowKernel, *rotBatch, int) int                           { return 0 }
