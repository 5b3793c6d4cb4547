// Package memfd is a memory pool in Linux memfd shared memory: the host
// tier, and the device tier on machines without a GPU.
//
// The arena is one sealed memfd mapped shared into the host. Its file
// descriptor is handed to the engine over the engine socket (SCM_RIGHTS,
// see package fdpass); the engine maps the same pages, so KV bytes never
// cross the socket. The memfd is sealed against shrinking and growing, so
// the engine cannot truncate it under the host (which would SIGBUS every
// access).
package memfd

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/slots"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Options configure an Arena.
type Options struct {
	// Tier is Device or Host; it is reported, not interpreted.
	Tier tier.Tier
	// Layout is the page shape; it is cloned.
	Layout *layout.Layout
	// Pages is the capacity in pages (at least 1).
	Pages int
	// Arrangement is how pages sit in the arena. Device arenas use
	// LayerMajor (one tensor per layer, as engines hold them), host arenas
	// PageMajor (a page is contiguous, so tier copies are one memcpy).
	Arrangement layout.Arrangement
	// Name shows in /proc/<pid>/fd for debugging; default "kvpilot-<tier>".
	Name string
}

// Arena is a memfd-backed memory pool. It implements pool.Memory, and
// pool.PageViewer when PageMajor.
type Arena struct {
	tier  tier.Tier
	lay   *layout.Layout
	arr   layout.Arrangement
	pages int
	pb    int
	fd    int
	alloc *slots.Allocator

	// unregister undoes a Register (CUDA pinning) at Close.
	unregister func([]byte) error
	pinned     bool

	// mu guards mem against Close: copies hold it shared, Close exclusively,
	// so a copy never touches an unmapped arena.
	mu  sync.RWMutex
	mem []byte
}

// New creates, sizes, seals and maps a memfd arena.
func New(o Options) (*Arena, error) {
	if o.Layout == nil {
		return nil, fmt.Errorf("memfd arena: no layout")
	}
	if err := o.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("memfd arena: %w", err)
	}
	if o.Pages < 1 || o.Pages > slots.MaxCapacity {
		return nil, fmt.Errorf("memfd arena: pages %d is outside 1..%d", o.Pages, slots.MaxCapacity)
	}
	if o.Arrangement != layout.PageMajor && o.Arrangement != layout.LayerMajor {
		return nil, fmt.Errorf("memfd arena: unknown arrangement %v", o.Arrangement)
	}
	pb := o.Layout.PageBytes()
	size := int64(pb) * int64(o.Pages)
	name := o.Name
	if name == "" {
		name = "kvpilot-" + o.Tier.String()
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd arena %s: memfd_create: %w", name, err)
	}
	mem, err := sizeAndMap(fd, size)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memfd arena %s (%d pages, %d bytes): %w", name, o.Pages, size, err)
	}
	alloc, err := slots.New(o.Pages)
	if err != nil {
		unix.Munmap(mem)
		unix.Close(fd)
		return nil, fmt.Errorf("memfd arena %s: %w", name, err)
	}
	return &Arena{tier: o.Tier, lay: o.Layout.Clone(), arr: o.Arrangement, pages: o.Pages,
		pb: pb, fd: fd, alloc: alloc, mem: mem}, nil
}

func sizeAndMap(fd int, size int64) ([]byte, error) {
	if err := unix.Ftruncate(fd, size); err != nil {
		return nil, fmt.Errorf("ftruncate: %w", err)
	}
	// Sealed before anyone else sees the fd: the size can never change.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

// Tier reports the tier this arena serves.
func (a *Arena) Tier() tier.Tier { return a.tier }

// Layout returns the arena's layout (do not modify).
func (a *Arena) Layout() *layout.Layout { return a.lay }

// Stats returns the slot accounting.
func (a *Arena) Stats() pool.Stats {
	c, u, f := a.alloc.Stats()
	return pool.Stats{Capacity: c, Used: u, Free: f, PageBytes: a.pb}
}

// Alloc appends n free slots to dst, all or nothing.
func (a *Arena) Alloc(dst []pool.Slot, n int) ([]pool.Slot, error) {
	out, err := a.alloc.Alloc(dst, n)
	if err != nil {
		return out, fmt.Errorf("%s arena: %w", a.tier, err)
	}
	return out, nil
}

// Free returns slots to the arena; the bytes are left as they are.
func (a *Arena) Free(s ...pool.Slot) error {
	if err := a.alloc.Free(s...); err != nil {
		return fmt.Errorf("%s arena: %w", a.tier, err)
	}
	return nil
}

// Handle describes the memfd for the engine. The fd stays owned by the
// arena; a sender passes it with SCM_RIGHTS, which duplicates it.
func (a *Arena) Handle() pool.Handle {
	return pool.Handle{Kind: pool.HandleMemfd, Tier: a.tier, FD: a.fd, Size: int64(a.pb) * int64(a.pages),
		Slots: a.pages, Arrangement: a.arr, Fingerprint: a.lay.Fingerprint(), Pinned: a.pinned}
}

// Bytes returns the whole mapping. It is invalid after Close.
func (a *Arena) Bytes() []byte { return a.mem }

// Register page-locks the arena for DMA with register (cuMemHostRegister
// through cudadrv) and arranges for unregister to run at Close. The handle
// then reports Pinned.
func (a *Arena) Register(register, unregister func([]byte) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return fmt.Errorf("%s arena: %w", a.tier, pool.ErrClosed)
	}
	if a.pinned {
		return fmt.Errorf("%s arena: already registered", a.tier)
	}
	if err := register(a.mem); err != nil {
		return fmt.Errorf("%s arena: registering %d bytes as pinned memory: %w", a.tier, len(a.mem), err)
	}
	a.pinned, a.unregister = true, unregister
	return nil
}

// ReadPage copies slot s into dst in canonical order.
func (a *Arena) ReadPage(s pool.Slot, dst []byte) error {
	return a.copyPage(s, dst, false)
}

// WritePage copies src (canonical order) into slot s.
func (a *Arena) WritePage(s pool.Slot, src []byte) error {
	return a.copyPage(s, src, true)
}

// PageView returns the live bytes of slot s; only PageMajor arenas have
// contiguous pages. The slice is invalid after Close.
func (a *Arena) PageView(s pool.Slot) ([]byte, error) {
	if a.arr != layout.PageMajor {
		return nil, fmt.Errorf("%s arena: page view of a %v arena: %w", a.tier, a.arr, errors.ErrUnsupported)
	}
	if err := a.checkSlot(s); err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.mem == nil {
		return nil, fmt.Errorf("%s arena: %w", a.tier, pool.ErrClosed)
	}
	off := int(s) * a.pb
	return a.mem[off : off+a.pb : off+a.pb], nil
}

func (a *Arena) checkSlot(s pool.Slot) error {
	if int(s) >= a.pages {
		return fmt.Errorf("%s arena: slot %d: %w (capacity %d)", a.tier, s, pool.ErrBadSlot, a.pages)
	}
	return checkAllocated(a, s)
}

func (a *Arena) copyPage(s pool.Slot, buf []byte, write bool) error {
	if err := pool.CheckPage(buf, a.pb); err != nil {
		return fmt.Errorf("%s arena slot %d: %w", a.tier, s, err)
	}
	if err := a.checkSlot(s); err != nil {
		return err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.mem == nil {
		return fmt.Errorf("%s arena: %w", a.tier, pool.ErrClosed)
	}
	copySegments(a.lay, a.arr, a.pages, a.mem, s, buf, write)
	return nil
}

// copySegments moves one page between an arena and a canonical buffer.
// PageMajor is one copy; LayerMajor is one copy per (layer, buffer)
// segment, each PageSize rows long.
func copySegments(l *layout.Layout, arr layout.Arrangement, pages int, mem []byte, s pool.Slot, buf []byte, write bool) {
	if arr == layout.PageMajor {
		off := int(s) * len(buf)
		if write {
			copy(mem[off:off+len(buf)], buf)
		} else {
			copy(buf, mem[off:off+len(buf)])
		}
		return
	}
	var pageOff int
	batch := segmentBatch{pageBytes: len(buf)}
	for layer := 0; layer < l.Layers; layer++ {
		for b := range l.Buffers {
			n := l.SegmentBytes(b)
			off := int(l.ArenaSegmentOffset(arr, pages, int(s), layer, b))
			if write {
				batch.add(mem[off:off+n], buf[pageOff:pageOff+n])
			} else {
				batch.add(buf[pageOff:pageOff+n], mem[off:off+n])
			}
			pageOff += n
		}
	}
	batch.flush()
}

// Close unmaps and closes the memfd. The memory lives on in any process
// that still maps it (the engine), and is freed when the last one unmaps.
func (a *Arena) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return nil
	}
	var uerr error
	if a.unregister != nil {
		uerr = a.unregister(a.mem)
	}
	err := errors.Join(uerr, unix.Munmap(a.mem), unix.Close(a.fd))
	a.mem = nil
	a.fd = -1
	if err != nil {
		return fmt.Errorf("%s arena close: %w", a.tier, err)
	}
	return nil
}

var (
	_ pool.Memory     = (*Arena)(nil)
	_ pool.PageViewer = (*Arena)(nil)
)
