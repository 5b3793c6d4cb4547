package kernels

import (
	"fmt"
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

// Arena is KV memory with its layout: Host for CPU-addressable memory, or
// Device (with Host nil) for CUDA device memory of at least ArenaBytes.
type Arena struct {
	Layout *Layout
	Host   []byte
	Device cudadrv.DevicePtr
}

// OnDevice reports whether a is CUDA device memory.
func (a Arena) OnDevice() bool { return a.Host == nil && a.Device != 0 }

// checkHost validates a host arena: layout present, large enough, and
// aligned for its element type (the CPU kernels read elements in place).
func (a Arena) checkHost() error {
	if a.Layout == nil {
		return fmt.Errorf("arena has no layout: %w", ErrLayout)
	}
	if a.Host == nil {
		return fmt.Errorf("arena is not host memory: %w", ErrMemory)
	}
	if int64(len(a.Host)) < a.Layout.size {
		return fmt.Errorf("arena of %d bytes is smaller than its layout's %d: %w", len(a.Host), a.Layout.size, ErrLayout)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(a.Host)))%uintptr(a.Layout.spec.DType.Size()) != 0 {
		return fmt.Errorf("arena base is not %d-byte aligned: %w", a.Layout.spec.DType.Size(), ErrLayout)
	}
	return nil
}

// sameMemory reports whether two arenas may alias, in which case copies
// between them need read-before-write ordering.
func sameMemory(x, y Arena) bool {
	if x.Host != nil && y.Host != nil {
		xl, xh := uintptr(unsafe.Pointer(unsafe.SliceData(x.Host))), uintptr(len(x.Host))
		yl, yh := uintptr(unsafe.Pointer(unsafe.SliceData(y.Host))), uintptr(len(y.Host))
		return xl < yl+yh && yl < xl+xh
	}
	return x.Host == nil && y.Host == nil && x.Device == y.Device
}
