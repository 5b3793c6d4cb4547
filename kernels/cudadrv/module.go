package cudadrv

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a loaded PTX or cubin image.
type Module struct {
	c      *Context
	handle uintptr
}

// Function is a kernel entry point (CUfunction) of a loaded Module.
type Function uintptr

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// KernelArg is one kernel parameter, stored in 8 bytes little-endian. The
// driver reads as many bytes as the parameter's declared size, so a 32-bit
// parameter reads the low half. Struct parameters are not supported.
type KernelArg uint64

// Kernel parameter constructors.
func ArgPtr(p DevicePtr) KernelArg { return KernelArg(p) }
func ArgU64(v uint64) KernelArg    { return KernelArg(v) }
func ArgI64(v int64) KernelArg     { return KernelArg(uint64(v)) }
func ArgU32(v uint32) KernelArg    { return KernelArg(v) }
func ArgI32(v int32) KernelArg     { return KernelArg(uint32(v)) }
func ArgF32(v float32) KernelArg   { return KernelArg(math.Float32bits(v)) }

// maxKernelArgs bounds the argument block to half the scratch page for the
// values and half for the pointer array.
const maxKernelArgs = scratchBytes / 16

// ModuleLoadData loads a PTX (text) or cubin image; PTX is JIT-compiled for
// the device by the driver. The image is copied and NUL-terminated here, and
// the driver reads it only during the call.
func (c *Context) ModuleLoadData(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuModuleLoadData: empty image: %w", ErrInvalidArgument)
	}
	buf := make([]byte, len(image)+1)
	copy(buf, image)
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	m := &Module{c: c}
	err := c.do(func() error {
		if err := check("cuModuleLoadData", call(c.drv.fn.cuModuleLoadData, c.scratchAddr(), uintptr(unsafe.Pointer(&buf[0])))); err != nil {
			return err
		}
		m.handle = uintptr(c.scratchU64(0))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Function looks up a kernel by its (extern "C") name.
func (m *Module) Function(name string) (Function, error) {
	if name == "" {
		return 0, fmt.Errorf("cuModuleGetFunction: empty name: %w", ErrInvalidArgument)
	}
	cname := append([]byte(name), 0)
	var pin runtime.Pinner
	pin.Pin(&cname[0])
	defer pin.Unpin()
	var f Function
	err := m.c.do(func() error {
		if err := check("cuModuleGetFunction "+name, call(m.c.drv.fn.cuModuleGetFunction, m.c.scratchAddr(), m.handle, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
			return err
		}
		f = Function(m.c.scratchU64(0))
		return nil
	})
	return f, err
}

// Unload unloads the module; its Functions become invalid.
func (m *Module) Unload() error {
	return m.c.do(func() error { return check("cuModuleUnload", call(m.c.drv.fn.cuModuleUnload, m.handle)) })
}

// Launch enqueues kernel f on stream s (0: the default stream). The argument
// block is built in the context's off-heap scratch page; cuLaunchKernel copies
// it before returning, so the page is free again for the next call.
func (c *Context) Launch(f Function, grid, block Dim3, sharedMem uint32, s Stream, args ...KernelArg) error {
	if len(args) > maxKernelArgs {
		return fmt.Errorf("cuLaunchKernel: %d arguments, at most %d: %w", len(args), maxKernelArgs, ErrInvalidArgument)
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return fmt.Errorf("cuLaunchKernel: empty grid %v or block %v: %w", grid, block, ErrInvalidArgument)
	}
	return c.do(func() error {
		n := len(args)
		base := c.scratchAddr()
		for i, a := range args {
			*(*uint64)(unsafe.Pointer(&c.scratch[8*i])) = uint64(a)
			*(*uintptr)(unsafe.Pointer(&c.scratch[8*(n+i)])) = base + uintptr(8*i)
		}
		var params uintptr
		if n > 0 {
			params = base + uintptr(8*n)
		}
		return check("cuLaunchKernel", call(c.drv.fn.cuLaunchKernel, uintptr(f),
			uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
			uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
			uintptr(sharedMem), uintptr(s), params, 0))
	})
}
