package cudadrv

import (
	"fmt"
	"unsafe"
)

// IpcMemHandle is a CUipcMemHandle: 64 opaque bytes another process passes to
// IpcOpenMemHandle to map the same device allocation. It is plain data and
// may be sent over a socket as is.
type IpcMemHandle struct {
	Reserved [64]byte
}

// IpcGetMemHandle exports the allocation that starts at p (it must be the
// base of a MemAlloc allocation).
func (c *Context) IpcGetMemHandle(p DevicePtr) (IpcMemHandle, error) {
	var h IpcMemHandle
	err := c.do(func() error {
		if err := check("cuIpcGetMemHandle", call(c.drv.fn.cuIpcGetMemHandle, c.scratchAddr(), uintptr(p))); err != nil {
			return err
		}
		copy(h.Reserved[:], c.scratch[:64])
		return nil
	})
	return h, err
}

// ipcLazyEnablePeerAccess is CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the only flag.
const ipcLazyEnablePeerAccess = 1

// IpcOpenMemHandle maps an allocation exported by another process. A process
// cannot open its own handles (the driver returns CUDA_ERROR_INVALID_CONTEXT
// or INVALID_VALUE); close the mapping with IpcCloseMemHandle.
func (c *Context) IpcOpenMemHandle(h IpcMemHandle) (DevicePtr, error) {
	if !c.drv.fn.cuIpcOpenMemHandleAvailable {
		return 0, fmt.Errorf("cuIpcOpenMemHandle: not exported by this driver: %w", ErrNoDriver)
	}
	var p DevicePtr
	err := c.do(func() error {
		r := Result(c.drv.fn.cuIpcOpenMemHandleByValue(c.scratchAddr(), h, ipcLazyEnablePeerAccess))
		if err := check("cuIpcOpenMemHandle", r); err != nil {
			return err
		}
		p = DevicePtr(*(*uint64)(unsafe.Pointer(&c.scratch[0])))
		return nil
	})
	return p, err
}

// IpcCloseMemHandle unmaps memory opened with IpcOpenMemHandle.
func (c *Context) IpcCloseMemHandle(p DevicePtr) error {
	return c.do(func() error { return check("cuIpcCloseMemHandle", call(c.drv.fn.cuIpcCloseMemHandle, uintptr(p))) })
}
