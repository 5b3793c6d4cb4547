// Package cudadrv is a minimal binding to the CUDA driver API (libcuda.so.1),
// loaded at run time through github.com/ebitengine/purego, so kvpilot builds
// with CGO_ENABLED=0 and runs on machines without a GPU or a CUDA toolkit.
//
// # API
//
//	Load() (*Driver, error)                          // dlopen libcuda.so.1 + cuInit; ErrNoDriver when absent
//	(*Driver).Version() int                          // cuDriverGetVersion, e.g. 12040
//	(*Driver).DeviceCount() (int, error)
//	(*Driver).Open(ordinal int) (*Context, error)    // primary context on its own locked OS thread
//	(*Context).Close() error
//	(*Context).Device() DeviceInfo                   // name, total memory, compute capability, SMs
//	(*Context).MemAlloc(n int) (DevicePtr, error) / MemFree(p DevicePtr) error
//	(*Context).MemsetD8(p DevicePtr, v byte, n int) error
//	(*Context).CopyHtoD(dst DevicePtr, src []byte) error          // synchronous
//	(*Context).CopyDtoH(dst []byte, src DevicePtr) error          // synchronous
//	(*Context).CopyDtoD(dst, src DevicePtr, n int) error          // synchronous
//	(*Context).CopyHtoD2D(dst DevicePtr, src []byte, p Pitch) error  // pitched rows, synchronous
//	(*Context).CopyDtoH2D(dst []byte, src DevicePtr, p Pitch) error  // pitched rows, synchronous
//	(*Context).CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error // src must be pinned (see below)
//	(*Context).CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error // dst must be pinned
//	(*Context).CopyDtoDAsync(dst, src DevicePtr, n int, s Stream) error
//	(*Context).MemAllocHost(n int) ([]byte, error) / MemFreeHost(b []byte) error
//	(*Context).HostRegister(b []byte, flags HostRegisterFlags) error / HostUnregister(b []byte) error
//	(*Context).HostDevicePtr(b []byte) (DevicePtr, error)          // device address of pinned host memory
//	(*Context).IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error)
//	(*Context).IpcOpenMemHandle(h IpcMemHandle) (DevicePtr, error) / IpcCloseMemHandle(p DevicePtr) error
//	(*Context).ModuleLoadData(image []byte) (*Module, error)      // PTX text or cubin
//	(*Module).Function(name string) (Function, error) / (*Module).Unload() error
//	(*Context).Launch(f Function, grid, block Dim3, sharedMem uint32, s Stream, args ...KernelArg) error
//	ArgPtr(DevicePtr) / ArgU64 / ArgI64 / ArgU32 / ArgI32 / ArgF32 -> KernelArg
//	(*Context).StreamCreate() (Stream, error) / StreamSynchronize(s) / StreamDestroy(s)
//	(*Context).Synchronize() error
//	(*Context).EventCreate() (Event, error) / EventRecord(e, s) / EventSynchronize(e)
//	(*Context).EventElapsed(start, end Event) (time.Duration, error) / EventDestroy(e)
//
// Sentinel errors: ErrNoDriver, ErrClosed, ErrInvalidArgument, ErrNotPinned;
// driver failures are a Result (the CUresult code), matchable with errors.As.
//
// # Threads and contexts
//
// The CUDA driver binds the current context to the calling OS thread, while Go
// moves goroutines between threads freely. Each Context therefore owns one
// goroutine locked to one OS thread (runtime.LockOSThread) on which it made the
// device's primary context current; every method hops to that thread and waits
// for the result. Methods are safe for concurrent use; calls are serialized.
//
// # Go memory
//
// The driver never receives a pointer into Go memory that it could use after
// the call returns. Out-parameters and kernel argument blocks live in a small
// off-heap (mmap) scratch page owned by the Context's thread. Synchronous
// copies (CopyHtoD, CopyDtoH) read or write a Go slice only for the duration of
// the call, with the slice pinned by runtime.Pinner. Asynchronous copies accept
// only host memory that this Context allocated with MemAllocHost or registered
// with HostRegister, and HostRegister itself must be given off-heap memory
// (mmap, memfd): registering a Go heap slice would let the DMA engine race the
// garbage collector's reuse of that memory.
package cudadrv

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LibraryName is the shared object Load opens. The unversioned libcuda.so is a
// development symlink and is often missing on machines that only have a driver.
const LibraryName = "libcuda.so.1"

var (
	// ErrNoDriver means libcuda.so.1 could not be loaded or initialized: no
	// NVIDIA driver on this machine. Callers fall back to the CPU kernels.
	ErrNoDriver = errors.New("cudadrv: CUDA driver not available")
	// ErrClosed is returned by any call on a Context after Close.
	ErrClosed = errors.New("cudadrv: context closed")
	// ErrInvalidArgument is a Go-side validation failure (never sent to the driver).
	ErrInvalidArgument = errors.New("cudadrv: invalid argument")
	// ErrNotPinned means an asynchronous copy was given host memory that is not
	// page-locked memory known to this Context.
	ErrNotPinned = errors.New("cudadrv: host memory is not pinned by this context")
)

// Driver is the loaded driver library. It is process-wide: Load returns the
// same value on every call.
type Driver struct {
	lib     uintptr
	version int
	fn      symbols
}

var (
	loadOnce   sync.Once
	loadDriver *Driver
	loadErr    error
)

// Load opens libcuda.so.1, resolves the entry points kvpilot uses and calls
// cuInit. The result (or the error) is cached for the life of the process.
// The error wraps ErrNoDriver when the library is absent or cuInit fails
// (for example CUDA_ERROR_NO_DEVICE on a machine with a driver but no GPU).
func Load() (*Driver, error) {
	loadOnce.Do(func() { loadDriver, loadErr = load() })
	return loadDriver, loadErr
}

func load() (*Driver, error) {
	lib, err := purego.Dlopen(LibraryName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %v: %w", LibraryName, err, ErrNoDriver)
	}
	d := &Driver{lib: lib}
	if err := d.fn.resolve(lib); err != nil {
		return nil, fmt.Errorf("load %s: %v: %w", LibraryName, err, ErrNoDriver)
	}
	if r := (call(d.fn.cuInit, 0)); r != Success {
		return nil, fmt.Errorf("cuInit: %w: %w", r, ErrNoDriver)
	}
	var v int32
	if r := (call(d.fn.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); r != Success {
		return nil, fmt.Errorf("cuDriverGetVersion: %w", r)
	}
	d.version = int(v)
	return d, nil
}

// Version is the driver's CUDA version as 1000*major + 10*minor.
func (d *Driver) Version() int { return d.version }

// DeviceCount is the number of CUDA devices visible to this process.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if r := (call(d.fn.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); r != Success {
		return 0, fmt.Errorf("cuDeviceGetCount: %w", r)
	}
	return int(n), nil
}
