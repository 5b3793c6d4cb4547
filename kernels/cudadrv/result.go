package cudadrv

import "fmt"

// Result is a CUresult returned by the driver. Any value but Success is an error.
type Result int32

// Success is CUDA_SUCCESS.
const Success Result = 0

// Results kvpilot reacts to by value.
const (
	ErrorInvalidValue   Result = 1
	ErrorOutOfMemory    Result = 2
	ErrorNotInitialized Result = 3
	ErrorNoDevice       Result = 100
	ErrorInvalidDevice  Result = 101
	ErrorInvalidImage   Result = 200
	ErrorInvalidContext Result = 201
	ErrorNotFound       Result = 500
	ErrorLaunchFailed   Result = 719
)

// resultNames covers the codes a kvpilot user is likely to see; others print
// by number. A static table avoids a driver call while formatting an error.
var resultNames = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	999: "CUDA_ERROR_UNKNOWN",
}

// Error prints the CUresult name and number, e.g. "CUDA_ERROR_OUT_OF_MEMORY (2)".
func (r Result) Error() string {
	if n, ok := resultNames[r]; ok {
		return fmt.Sprintf("%s (%d)", n, int32(r))
	}
	return fmt.Sprintf("CUresult %d", int32(r))
}

// check turns a CUresult into an error naming the driver call.
func check(op string, r Result) error {
	if r == Success {
		return nil
	}
	return fmt.Errorf("%s: %w", op, r)
}
