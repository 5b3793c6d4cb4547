package cudadrv

import (
	"fmt"
	"runtime"
	"unsafe"
)

// DevicePtr is a CUdeviceptr: an address in device memory (or one mapped
// from another process through IPC). Offsets are plain additions.
type DevicePtr uint64

// HostRegisterFlags are CU_MEMHOSTREGISTER_* flags.
type HostRegisterFlags uint32

const (
	// HostRegisterPortable makes the pinning visible to every context.
	HostRegisterPortable HostRegisterFlags = 1
	// HostRegisterDeviceMap maps the memory into the device address space.
	HostRegisterDeviceMap HostRegisterFlags = 2
)

// MemAlloc allocates n bytes of device memory (cuMemAlloc).
func (c *Context) MemAlloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuMemAlloc %d bytes: %w", n, ErrInvalidArgument)
	}
	var p DevicePtr
	err := c.do(func() error {
		if err := check(fmt.Sprintf("cuMemAlloc %d bytes", n), call(c.drv.fn.cuMemAlloc, c.scratchAddr(), uintptr(n))); err != nil {
			return err
		}
		p = DevicePtr(c.scratchU64(0))
		return nil
	})
	return p, err
}

// MemFree frees device memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	return c.do(func() error { return check("cuMemFree", call(c.drv.fn.cuMemFree, uintptr(p))) })
}

// MemsetD8 sets n bytes at p to v.
func (c *Context) MemsetD8(p DevicePtr, v byte, n int) error {
	if n < 0 {
		return fmt.Errorf("cuMemsetD8 %d bytes: %w", n, ErrInvalidArgument)
	}
	return c.do(func() error {
		return check("cuMemsetD8", call(c.drv.fn.cuMemsetD8, uintptr(p), uintptr(v), uintptr(n)))
	})
}

// CopyHtoD copies src into device memory and returns when the copy is done.
// src may be Go memory: it is pinned (runtime.Pinner) for the call only.
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(&src[0])
	defer pin.Unpin()
	return c.do(func() error {
		return check("cuMemcpyHtoD", call(c.drv.fn.cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))))
	})
}

// CopyDtoH copies device memory into dst and returns when the copy is done.
// dst may be Go memory: it is pinned (runtime.Pinner) for the call only.
func (c *Context) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(&dst[0])
	defer pin.Unpin()
	return c.do(func() error {
		return check("cuMemcpyDtoH", call(c.drv.fn.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))))
	})
}

// CopyDtoD copies n bytes between device addresses and returns when the
// copy is done. cuMemcpyDtoD alone returns once the copy is queued (the
// driver does not wait on the host for device-to-device copies), which the
// first GPU check showed as a copy "faster" than the memory: hence the
// context synchronize.
func (c *Context) CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return fmt.Errorf("cuMemcpyDtoD %d bytes: %w", n, ErrInvalidArgument)
	}
	return c.do(func() error {
		if err := check("cuMemcpyDtoD", call(c.drv.fn.cuMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(n))); err != nil {
			return err
		}
		return check("cuCtxSynchronize", call(c.drv.fn.cuCtxSynchronize))
	})
}

// CopyDtoDAsync enqueues a device-to-device copy on stream s.
func (c *Context) CopyDtoDAsync(dst, src DevicePtr, n int, s Stream) error {
	if n < 0 {
		return fmt.Errorf("cuMemcpyDtoDAsync %d bytes: %w", n, ErrInvalidArgument)
	}
	return c.do(func() error {
		return check("cuMemcpyDtoDAsync", call(c.drv.fn.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
	})
}

// CopyHtoDAsync enqueues a host-to-device copy on stream s. src must lie in
// memory from MemAllocHost or HostRegister on this Context (ErrNotPinned
// otherwise) and must stay untouched until the stream is synchronized.
func (c *Context) CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	if err := c.checkPinned(src); err != nil {
		return fmt.Errorf("cuMemcpyHtoDAsync: %w", err)
	}
	return c.do(func() error {
		return check("cuMemcpyHtoDAsync", call(c.drv.fn.cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), uintptr(s)))
	})
}

// CopyDtoHAsync enqueues a device-to-host copy on stream s; dst has the same
// requirements as CopyHtoDAsync's src.
func (c *Context) CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	if err := c.checkPinned(dst); err != nil {
		return fmt.Errorf("cuMemcpyDtoHAsync: %w", err)
	}
	return c.do(func() error {
		return check("cuMemcpyDtoHAsync", call(c.drv.fn.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), uintptr(s)))
	})
}

func (c *Context) checkPinned(b []byte) error {
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	c.pinnedMu.Lock()
	defer c.pinnedMu.Unlock()
	for base, r := range c.pinned {
		if lo >= base && hi <= base+uintptr(r.n) {
			return nil
		}
	}
	return fmt.Errorf("%d bytes at %#x: %w", len(b), lo, ErrNotPinned)
}

// MemAllocHost allocates n bytes of page-locked host memory (cuMemAllocHost).
// The slice is off-heap; free it with MemFreeHost or let Close free it.
func (c *Context) MemAllocHost(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuMemAllocHost %d bytes: %w", n, ErrInvalidArgument)
	}
	var b []byte
	err := c.do(func() error {
		if err := check(fmt.Sprintf("cuMemAllocHost %d bytes", n), call(c.drv.fn.cuMemAllocHost, c.scratchAddr(), uintptr(n))); err != nil {
			return err
		}
		p := *(*unsafe.Pointer)(unsafe.Pointer(&c.scratch[0]))
		b = unsafe.Slice((*byte)(p), n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.pinnedMu.Lock()
	c.pinned[uintptr(unsafe.Pointer(&b[0]))] = pinnedRange{n: n, owned: true}
	c.pinnedMu.Unlock()
	return b, nil
}

// MemFreeHost frees memory from MemAllocHost.
func (c *Context) MemFreeHost(b []byte) error {
	base, err := c.forget(b, true)
	if err != nil {
		return fmt.Errorf("cuMemFreeHost: %w", err)
	}
	return c.do(func() error { return check("cuMemFreeHost", call(c.drv.fn.cuMemFreeHost, base)) })
}

// HostRegister page-locks b for DMA (cuMemHostRegister). b must be off-heap
// memory such as an mmap'd memfd pool: never a Go heap slice (package doc).
// The driver requires nothing about alignment, but whole pages are pinned.
func (c *Context) HostRegister(b []byte, flags HostRegisterFlags) error {
	if len(b) == 0 {
		return fmt.Errorf("cuMemHostRegister empty range: %w", ErrInvalidArgument)
	}
	base := uintptr(unsafe.Pointer(&b[0]))
	err := c.do(func() error {
		return check(fmt.Sprintf("cuMemHostRegister %d bytes", len(b)), call(c.drv.fn.cuMemHostRegister, base, uintptr(len(b)), uintptr(flags)))
	})
	if err != nil {
		return err
	}
	c.pinnedMu.Lock()
	c.pinned[base] = pinnedRange{n: len(b), owned: false}
	c.pinnedMu.Unlock()
	return nil
}

// HostUnregister undoes HostRegister; b must be the slice that was registered.
func (c *Context) HostUnregister(b []byte) error {
	base, err := c.forget(b, false)
	if err != nil {
		return fmt.Errorf("cuMemHostUnregister: %w", err)
	}
	return c.do(func() error { return check("cuMemHostUnregister", call(c.drv.fn.cuMemHostUnregister, base)) })
}

func (c *Context) forget(b []byte, owned bool) (uintptr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty range: %w", ErrInvalidArgument)
	}
	base := uintptr(unsafe.Pointer(&b[0]))
	c.pinnedMu.Lock()
	defer c.pinnedMu.Unlock()
	r, ok := c.pinned[base]
	if !ok || r.owned != owned {
		return 0, fmt.Errorf("%#x was not %s by this context: %w", base, map[bool]string{true: "allocated", false: "registered"}[owned], ErrInvalidArgument)
	}
	delete(c.pinned, base)
	return base, nil
}

// HostDevicePtr returns the device address of pinned host memory b (from
// MemAllocHost, or HostRegister with HostRegisterDeviceMap), so kernels can
// read and write it directly over the bus. b must lie in one such range.
func (c *Context) HostDevicePtr(b []byte) (DevicePtr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("cuMemHostGetDevicePointer: empty range: %w", ErrInvalidArgument)
	}
	if err := c.checkPinned(b); err != nil {
		return 0, fmt.Errorf("cuMemHostGetDevicePointer: %w", err)
	}
	var p DevicePtr
	err := c.do(func() error {
		if err := check("cuMemHostGetDevicePointer", call(c.drv.fn.cuMemHostGetDevicePointer, c.scratchAddr(), uintptr(unsafe.Pointer(&b[0])), 0)); err != nil {
			return err
		}
		p = DevicePtr(c.scratchU64(0))
		return nil
	})
	return p, err
}
