package cudadrv

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// symbols holds the resolved driver entry points. Versioned names (_v2) are
// the ones the CUDA headers map the plain names to since CUDA 4/11; calling
// the unversioned symbol would get the legacy 32-bit-size ABI.
type symbols struct {
	cuInit                      uintptr
	cuDriverGetVersion          uintptr
	cuDeviceGetCount            uintptr
	cuDeviceGet                 uintptr
	cuDeviceGetName             uintptr
	cuDeviceGetAttribute        uintptr
	cuDeviceTotalMem            uintptr
	cuDevicePrimaryCtxRetain    uintptr
	cuDevicePrimaryCtxRelease   uintptr
	cuCtxSetCurrent             uintptr
	cuCtxSynchronize            uintptr
	cuMemAlloc                  uintptr
	cuMemFree                   uintptr
	cuMemsetD8                  uintptr
	cuMemAllocHost              uintptr
	cuMemFreeHost               uintptr
	cuMemHostRegister           uintptr
	cuMemHostUnregister         uintptr
	cuMemHostGetDevicePointer   uintptr
	cuMemcpyHtoD                uintptr
	cuMemcpyDtoH                uintptr
	cuMemcpyDtoD                uintptr
	cuMemcpy2D                  uintptr
	cuMemcpyHtoDAsync           uintptr
	cuMemcpyDtoHAsync           uintptr
	cuMemcpyDtoDAsync           uintptr
	cuIpcGetMemHandle           uintptr
	cuIpcCloseMemHandle         uintptr
	cuModuleLoadData            uintptr
	cuModuleUnload              uintptr
	cuModuleGetFunction         uintptr
	cuLaunchKernel              uintptr
	cuStreamCreate              uintptr
	cuStreamSynchronize         uintptr
	cuStreamDestroy             uintptr
	cuEventCreate               uintptr
	cuEventRecord               uintptr
	cuEventSynchronize          uintptr
	cuEventElapsedTime          uintptr
	cuEventDestroy              uintptr
	cuGetErrorName              uintptr
	cuGetErrorString            uintptr
	cuIpcOpenMemHandleByValue   func(pdptr uintptr, handle IpcMemHandle, flags uint32) int32
	cuIpcOpenMemHandleAvailable bool
}

func (s *symbols) resolve(lib uintptr) error {
	table := []struct {
		dst  *uintptr
		name string
	}{
		{&s.cuInit, "cuInit"},
		{&s.cuDriverGetVersion, "cuDriverGetVersion"},
		{&s.cuDeviceGetCount, "cuDeviceGetCount"},
		{&s.cuDeviceGet, "cuDeviceGet"},
		{&s.cuDeviceGetName, "cuDeviceGetName"},
		{&s.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&s.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
		{&s.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&s.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&s.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&s.cuCtxSynchronize, "cuCtxSynchronize"},
		{&s.cuMemAlloc, "cuMemAlloc_v2"},
		{&s.cuMemFree, "cuMemFree_v2"},
		{&s.cuMemsetD8, "cuMemsetD8_v2"},
		{&s.cuMemAllocHost, "cuMemAllocHost_v2"},
		{&s.cuMemFreeHost, "cuMemFreeHost"},
		{&s.cuMemHostRegister, "cuMemHostRegister_v2"},
		{&s.cuMemHostUnregister, "cuMemHostUnregister"},
		{&s.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
		{&s.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&s.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&s.cuMemcpyDtoD, "cuMemcpyDtoD_v2"},
		{&s.cuMemcpy2D, "cuMemcpy2D_v2"},
		{&s.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&s.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&s.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&s.cuIpcGetMemHandle, "cuIpcGetMemHandle"},
		{&s.cuIpcCloseMemHandle, "cuIpcCloseMemHandle"},
		{&s.cuModuleLoadData, "cuModuleLoadData"},
		{&s.cuModuleUnload, "cuModuleUnload"},
		{&s.cuModuleGetFunction, "cuModuleGetFunction"},
		{&s.cuLaunchKernel, "cuLaunchKernel"},
		{&s.cuStreamCreate, "cuStreamCreate"},
		{&s.cuStreamSynchronize, "cuStreamSynchronize"},
		{&s.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&s.cuEventCreate, "cuEventCreate"},
		{&s.cuEventRecord, "cuEventRecord"},
		{&s.cuEventSynchronize, "cuEventSynchronize"},
		{&s.cuEventElapsedTime, "cuEventElapsedTime"},
		{&s.cuEventDestroy, "cuEventDestroy_v2"},
		{&s.cuGetErrorName, "cuGetErrorName"},
		{&s.cuGetErrorString, "cuGetErrorString"},
	}
	for _, e := range table {
		p, err := purego.Dlsym(lib, e.name)
		if err != nil || p == 0 {
			return fmt.Errorf("resolve %s: %v", e.name, err)
		}
		*e.dst = p
	}
	// CUipcMemHandle (64 bytes) is passed by value, which SyscallN cannot
	// express portably (amd64 copies it onto the stack, arm64 passes a pointer
	// to a copy), so this one entry point goes through purego's typed calls.
	// The _v2 name exists since CUDA 11.x; older drivers export only the plain one.
	for _, name := range []string{"cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"} {
		if p, err := purego.Dlsym(lib, name); err == nil && p != 0 {
			purego.RegisterFunc(&s.cuIpcOpenMemHandleByValue, p)
			s.cuIpcOpenMemHandleAvailable = true
			break
		}
	}
	return nil
}

// call invokes a driver entry point and returns its CUresult. uintptrescapes
// keeps any object whose address is converted to uintptr in the argument list
// alive (and on the heap) for the duration of the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(uint32(r)))
}
