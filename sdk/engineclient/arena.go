package engineclient

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// Arena is one tier's pool as the engine sees it: a shared mapping of the
// host's memfd (Kind "memfd"), or a CUDA IPC handle the engine opens with
// cuIpcOpenMemHandle (Kind "cuda_ipc", Bytes nil). Slots are the host's to
// hand out; the engine reads and writes the slots a call gave it.
type Arena struct {
	Tier        string // device or host
	Kind        string
	Slots       int
	Arrangement enginewire.Arrangement
	SizeBytes   int64
	Pinned      bool
	// Staging: the device tier of a connector-mode registration, which the
	// engine copies its own pages through rather than computing in.
	Staging bool
	// CUDAIPC is the 64-byte handle of a cuda_ipc arena, on DeviceOrdinal.
	CUDAIPC       []byte
	DeviceOrdinal int

	layout *enginewire.Layout
	mem    []byte
}

// mapArena maps a memfd arena's descriptor after checking its size against
// the layout; it does not keep fd.
func mapArena(fd int, a *Arena) error {
	want := int64(a.layout.PageBytes()) * int64(a.Slots)
	if a.Slots < 1 || a.SizeBytes != want {
		return fmt.Errorf("%s arena: %d bytes do not hold %d pages of %d bytes: the registered layout and the host disagree", a.Tier, a.SizeBytes, a.Slots, a.layout.PageBytes())
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s arena: fstat: %w", a.Tier, err)
	}
	if st.Size != a.SizeBytes {
		return fmt.Errorf("%s arena: descriptor is %d bytes, the host said %d", a.Tier, st.Size, a.SizeBytes)
	}
	mem, err := unix.Mmap(fd, 0, int(a.SizeBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("%s arena: mmap %d bytes: %w", a.Tier, a.SizeBytes, err)
	}
	a.mem = mem
	return nil
}

func (a *Arena) unmap() error {
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem = nil
	return err
}

// Mapped reports whether the arena is mapped in this process.
func (a *Arena) Mapped() bool { return a.mem != nil }

// Bytes is the whole mapping (nil for a CUDA arena): an engine builds its
// per-layer tensors on it (see Region).
func (a *Arena) Bytes() []byte { return a.mem }

// Layout returns the registered layout (do not modify).
func (a *Arena) Layout() *enginewire.Layout { return a.layout }

func (a *Arena) check(slot, layer, buf int) error {
	switch {
	case a.mem == nil:
		return fmt.Errorf("%s arena is not mapped in this process", a.Tier)
	case slot < 0 || slot >= a.Slots:
		return fmt.Errorf("%s arena: slot %d outside 0..%d", a.Tier, slot, a.Slots-1)
	case layer < 0 || layer >= a.layout.Layers || buf < 0 || buf >= len(a.layout.Buffers):
		return fmt.Errorf("%s arena: layer %d buffer %d outside the layout", a.Tier, layer, buf)
	}
	return nil
}

// Segment returns the live bytes of (layer, buf) of page slot: PageSize
// rows of that buffer.
func (a *Arena) Segment(slot, layer, buf int) ([]byte, error) {
	if err := a.check(slot, layer, buf); err != nil {
		return nil, err
	}
	off := a.layout.ArenaSegmentOffset(a.Arrangement, a.Slots, slot, layer, buf)
	return a.mem[off : off+int64(a.layout.SegmentBytes(buf)) : off+int64(a.layout.SegmentBytes(buf))], nil
}

// Row returns the live bytes of one token's row: row r of page slot, in
// (layer, buf).
func (a *Arena) Row(slot, layer, buf, r int) ([]byte, error) {
	seg, err := a.Segment(slot, layer, buf)
	if err != nil {
		return nil, err
	}
	if r < 0 || r >= a.layout.PageSize {
		return nil, fmt.Errorf("%s arena: row %d outside a page of %d", a.Tier, r, a.layout.PageSize)
	}
	rb := a.layout.RowBytes(buf)
	return seg[r*rb : (r+1)*rb : (r+1)*rb], nil
}

// ReadPage copies page slot into dst in canonical order (PageBytes long).
func (a *Arena) ReadPage(slot int, dst []byte) error { return a.copyPage(slot, dst, false) }

// WritePage copies src (canonical order, PageBytes long) into page slot.
func (a *Arena) WritePage(slot int, src []byte) error { return a.copyPage(slot, src, true) }

func (a *Arena) copyPage(slot int, b []byte, write bool) error {
	if len(b) != a.layout.PageBytes() {
		return fmt.Errorf("%s arena: buffer of %d bytes is not one page of %d", a.Tier, len(b), a.layout.PageBytes())
	}
	for layer := 0; layer < a.layout.Layers; layer++ {
		for buf := range a.layout.Buffers {
			seg, err := a.Segment(slot, layer, buf)
			if err != nil {
				return err
			}
			off := a.layout.PageSegmentOffset(layer, buf)
			if write {
				copy(seg, b[off:])
			} else {
				copy(b[off:off+int64(len(seg))], seg)
			}
		}
	}
	return nil
}
