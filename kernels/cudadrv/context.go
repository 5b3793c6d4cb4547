package cudadrv

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// DeviceInfo describes the device a Context runs on.
type DeviceInfo struct {
	Ordinal         int
	Name            string
	TotalMem        uint64
	ComputeMajor    int
	ComputeMinor    int
	Multiprocessors int
	// MaxPitch is the widest pitch a pitched copy (CopyHtoD2D) accepts.
	MaxPitch int
}

// Context is a device's primary context, current on one dedicated OS thread.
// All driver calls for the device go through it.
type Context struct {
	drv  *Driver
	dev  int32
	ctx  uintptr
	info DeviceInfo

	// reqs carries work to the context thread; closed by Close.
	reqs chan func()
	mu   sync.Mutex // guards closed and serializes submission with Close
	// closed is set by Close; later calls fail with ErrClosed.
	closed bool

	// scratch is an off-heap page, touched only on the context thread, that
	// holds out-parameters and kernel argument blocks (see package doc).
	scratch []byte

	pinnedMu sync.Mutex
	// pinned lists host ranges usable by asynchronous copies: from
	// MemAllocHost (owned) or HostRegister (borrowed), keyed by base address.
	pinned map[uintptr]pinnedRange
}

type pinnedRange struct {
	n     int
	owned bool
}

const scratchBytes = 4096

// Open retains the primary context of device ordinal and starts the OS
// thread that will hold it current. Close releases both.
func (d *Driver) Open(ordinal int) (*Context, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("open device %d of %d: %w", ordinal, n, ErrInvalidArgument)
	}
	scratch, err := syscall.Mmap(-1, 0, scratchBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("open device %d: scratch page: %w", ordinal, err)
	}
	c := &Context{drv: d, reqs: make(chan func()), scratch: scratch, pinned: map[uintptr]pinnedRange{}}
	started := make(chan error, 1)
	go c.loop(ordinal, started)
	if err := <-started; err != nil {
		_ = syscall.Munmap(scratch)
		return nil, err
	}
	return c, nil
}

// loop is the context thread. It never unlocks the OS thread: when it
// returns, the Go runtime destroys the thread together with its CUDA binding.
func (c *Context) loop(ordinal int, started chan<- error) {
	runtime.LockOSThread()
	if err := c.setup(ordinal); err != nil {
		started <- err
		return
	}
	started <- nil
	for fn := range c.reqs {
		fn()
	}
}

func (c *Context) setup(ordinal int) error {
	f := &c.drv.fn
	s := c.scratchAddr()
	if err := check("cuDeviceGet", call(f.cuDeviceGet, s, uintptr(ordinal))); err != nil {
		return err
	}
	c.dev = *(*int32)(unsafe.Pointer(&c.scratch[0]))
	if err := check("cuDevicePrimaryCtxRetain", call(f.cuDevicePrimaryCtxRetain, s, uintptr(c.dev))); err != nil {
		return err
	}
	c.ctx = *(*uintptr)(unsafe.Pointer(&c.scratch[0]))
	if err := check("cuCtxSetCurrent", call(f.cuCtxSetCurrent, c.ctx)); err != nil {
		call(f.cuDevicePrimaryCtxRelease, uintptr(c.dev))
		return err
	}
	c.info.Ordinal = ordinal
	const nameLen = 256
	if err := check("cuDeviceGetName", call(f.cuDeviceGetName, s, nameLen, uintptr(c.dev))); err == nil {
		name := c.scratch[:nameLen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		c.info.Name = string(name)
	}
	if call(f.cuDeviceTotalMem, s, uintptr(c.dev)) == Success {
		c.info.TotalMem = *(*uint64)(unsafe.Pointer(&c.scratch[0]))
	}
	c.info.ComputeMajor = c.attribute(75) // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	c.info.ComputeMinor = c.attribute(76) // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	c.info.Multiprocessors = c.attribute(16)
	c.info.MaxPitch = c.attribute(11) // CU_DEVICE_ATTRIBUTE_MAX_PITCH
	return nil
}

func (c *Context) attribute(attr int) int {
	if call(c.drv.fn.cuDeviceGetAttribute, c.scratchAddr(), uintptr(attr), uintptr(c.dev)) != Success {
		return 0
	}
	return int(*(*int32)(unsafe.Pointer(&c.scratch[0])))
}

func (c *Context) scratchAddr() uintptr { return uintptr(unsafe.Pointer(&c.scratch[0])) }

// scratchU64 reads the i-th 8-byte word of the scratch page.
func (c *Context) scratchU64(i int) uint64 {
	return *(*uint64)(unsafe.Pointer(&c.scratch[8*i]))
}

// do runs fn on the context thread and returns its error.
func (c *Context) do(fn func() error) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	done := make(chan error, 1)
	c.reqs <- func() { done <- fn() }
	c.mu.Unlock()
	return <-done
}

// Device reports the device this Context runs on.
func (c *Context) Device() DeviceInfo { return c.info }

// Synchronize waits for all work on the device to finish (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	return c.do(func() error { return check("cuCtxSynchronize", call(c.drv.fn.cuCtxSynchronize)) })
}

// Close frees pinned host memory the Context allocated, unregisters what it
// registered, releases the primary context and ends the context thread.
// Device memory still allocated is freed by the driver when the primary
// context's last reference goes. Later calls return ErrClosed.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	done := make(chan error, 1)
	c.reqs <- func() { done <- c.release() }
	close(c.reqs)
	c.mu.Unlock()
	err := <-done
	if e := syscall.Munmap(c.scratch); e != nil && err == nil {
		err = fmt.Errorf("close: unmap scratch: %w", e)
	}
	return err
}

func (c *Context) release() error {
	c.pinnedMu.Lock()
	defer c.pinnedMu.Unlock()
	var first error
	for base, r := range c.pinned {
		var res Result
		if r.owned {
			res = call(c.drv.fn.cuMemFreeHost, base)
		} else {
			res = call(c.drv.fn.cuMemHostUnregister, base)
		}
		if e := check("close: release pinned host memory", res); e != nil && first == nil {
			first = e
		}
	}
	clear(c.pinned)
	if e := check("cuDevicePrimaryCtxRelease", call(c.drv.fn.cuDevicePrimaryCtxRelease, uintptr(c.dev))); e != nil && first == nil {
		first = e
	}
	return first
}
