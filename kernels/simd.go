package kernels

import (
	"os"
	"sync/atomic"
)

// GenericEnv names the environment variable that, set to "generic", makes
// the CPU engine use only its plain-Go kernels, for comparison and for
// testing the fallback on machines that have the vector kernels.
const GenericEnv = "KVPILOT_CPU_KERNELS"

// simdOff is set when the vector kernels must not run: forced by GenericEnv
// or by tests (setSIMD). The hardware check is simdSupported.
var simdOff atomic.Bool

func init() {
	if os.Getenv(GenericEnv) == "generic" {
		simdOff.Store(true)
	}
}

func simdEnabled() bool { return simdSupported && !simdOff.Load() }

// CPUKernels reports which kernels the CPU engine uses on this machine:
// "avx2" (amd64 with AVX2 and F16C) or "generic" (plain Go).
func CPUKernels() string {
	if simdEnabled() {
		return simdName
	}
	return "generic"
}
