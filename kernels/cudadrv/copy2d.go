package cudadrv

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Pitched copies (cuMemcpy2D): Height rows of Width bytes, each side's rows
// Pitch bytes apart. One call moves what would otherwise take one copy per
// row; the device tier's layer-major pages are such a shape (one row per
// layer, the arena's per-layer tensors far apart), and a synchronous copy
// per row costs the driver's round trip every time.

// Memory types of CUDA_MEMCPY2D (CUmemorytype).
const (
	memoryTypeHost   = 1
	memoryTypeDevice = 2
)

// memcpy2D is CUDA_MEMCPY2D as the driver lays it out on 64-bit Linux.
type memcpy2D struct {
	srcXInBytes, srcY uint64
	srcMemoryType     uint32
	_                 uint32
	srcHost           uint64
	srcDevice         uint64
	srcArray          uint64
	srcPitch          uint64
	dstXInBytes, dstY uint64
	dstMemoryType     uint32
	_                 uint32
	dstHost           uint64
	dstDevice         uint64
	dstArray          uint64
	dstPitch          uint64
	widthInBytes      uint64
	height            uint64
}

// Pitch shapes a pitched copy: Height rows of Width bytes, HostPitch bytes
// apart in the host slice (from its start) and DevicePitch bytes apart from
// the device address.
type Pitch struct {
	Width, Height, HostPitch, DevicePitch int
}

func (p Pitch) check(host int) error {
	if p.Width <= 0 || p.Height <= 0 || p.HostPitch < p.Width || p.DevicePitch < p.Width {
		return fmt.Errorf("%d rows of %d bytes at pitches %d (host) and %d (device): %w", p.Height, p.Width, p.HostPitch, p.DevicePitch, ErrInvalidArgument)
	}
	if need := (p.Height-1)*p.HostPitch + p.Width; host < need {
		return fmt.Errorf("%d rows of %d bytes at host pitch %d need %d host bytes, have %d: %w", p.Height, p.Width, p.HostPitch, need, host, ErrInvalidArgument)
	}
	return nil
}

// CopyHtoD2D copies p.Height rows of p.Width bytes from src (rows
// p.HostPitch apart) to dst (rows p.DevicePitch apart) and returns when the
// copy is done. src may be Go memory: it is pinned for the call only.
// Pitches above the device's MaxPitch are refused by the driver.
func (c *Context) CopyHtoD2D(dst DevicePtr, src []byte, p Pitch) error {
	return c.copy2D(src, dst, p, true)
}

// CopyDtoH2D copies p.Height rows of p.Width bytes from src (rows
// p.DevicePitch apart) into dst (rows p.HostPitch apart) and returns when
// the copy is done. dst may be Go memory: it is pinned for the call only.
func (c *Context) CopyDtoH2D(dst []byte, src DevicePtr, p Pitch) error {
	return c.copy2D(dst, src, p, false)
}

// copy2D runs one pitched copy between host and dev, toward the device when
// toDevice. The driver reads the descriptor from the context's off-heap
// scratch page (a Go pointer must not reach C).
func (c *Context) copy2D(host []byte, dev DevicePtr, p Pitch, toDevice bool) error {
	what := "cuMemcpy2D device to host"
	if toDevice {
		what = "cuMemcpy2D host to device"
	}
	if err := p.check(len(host)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var pin runtime.Pinner
	pin.Pin(&host[0])
	defer pin.Unpin()
	m := describe2D(uint64(uintptr(unsafe.Pointer(&host[0]))), dev, p, toDevice)
	return c.do(func() error {
		*(*memcpy2D)(unsafe.Pointer(&c.scratch[0])) = m
		return check(what, call(c.drv.fn.cuMemcpy2D, c.scratchAddr()))
	})
}

// describe2D is the driver's descriptor of a pitched copy between the host
// address host and dev.
func describe2D(host uint64, dev DevicePtr, p Pitch, toDevice bool) memcpy2D {
	m := memcpy2D{widthInBytes: uint64(p.Width), height: uint64(p.Height)}
	if toDevice {
		m.srcMemoryType, m.srcHost, m.srcPitch = memoryTypeHost, host, uint64(p.HostPitch)
		m.dstMemoryType, m.dstDevice, m.dstPitch = memoryTypeDevice, uint64(dev), uint64(p.DevicePitch)
	} else {
		m.srcMemoryType, m.srcDevice, m.srcPitch = memoryTypeDevice, uint64(dev), uint64(p.DevicePitch)
		m.dstMemoryType, m.dstHost, m.dstPitch = memoryTypeHost, host, uint64(p.HostPitch)
	}
	return m
}
