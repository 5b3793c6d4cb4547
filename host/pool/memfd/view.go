package memfd

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// View is another process's mapping of an arena, opened from the fd it
// received and the handle's description: what an engine written in Go (the
// reference engine) uses. It reads and writes pages but allocates nothing;
// slots are the host's to hand out.
type View struct {
	lay   *layout.Layout
	arr   layout.Arrangement
	pages int
	mem   []byte
}

// OpenView maps fd, checking that its size matches h and that h was made
// for layout l. It does not take ownership of fd.
func OpenView(fd int, h pool.Handle, l *layout.Layout) (*View, error) {
	if h.Kind != pool.HandleMemfd {
		return nil, fmt.Errorf("open memfd view: handle kind %v", h.Kind)
	}
	if fp := l.Fingerprint(); fp != h.Fingerprint {
		return nil, fmt.Errorf("open memfd view: handle is for layout %s, not %s", h.Fingerprint, fp)
	}
	if want := int64(l.PageBytes()) * int64(h.Slots); h.Size != want || h.Slots < 1 {
		return nil, fmt.Errorf("open memfd view: size %d does not hold %d pages of %d bytes", h.Size, h.Slots, l.PageBytes())
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("open memfd view: fstat: %w", err)
	}
	if st.Size != h.Size {
		return nil, fmt.Errorf("open memfd view: fd is %d bytes, handle says %d", st.Size, h.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(h.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("open memfd view: mmap: %w", err)
	}
	return &View{lay: l.Clone(), arr: h.Arrangement, pages: h.Slots, mem: mem}, nil
}

// ReadPage copies slot s into dst in canonical order.
func (v *View) ReadPage(s pool.Slot, dst []byte) error { return v.copy(s, dst, false) }

// WritePage copies src (canonical order) into slot s.
func (v *View) WritePage(s pool.Slot, src []byte) error { return v.copy(s, src, true) }

func (v *View) copy(s pool.Slot, buf []byte, write bool) error {
	if v.mem == nil {
		return fmt.Errorf("memfd view: %w", pool.ErrClosed)
	}
	if err := pool.CheckPage(buf, v.lay.PageBytes()); err != nil {
		return fmt.Errorf("memfd view slot %d: %w", s, err)
	}
	if int(s) >= v.pages {
		return fmt.Errorf("memfd view: slot %d: %w (capacity %d)", s, pool.ErrBadSlot, v.pages)
	}
	copySegments(v.lay, v.arr, v.pages, v.mem, s, buf, write)
	return nil
}

// Bytes returns the whole mapping (an engine builds its tensors on it).
func (v *View) Bytes() []byte { return v.mem }

// Close unmaps the view.
func (v *View) Close() error {
	if v.mem == nil {
		return nil
	}
	err := unix.Munmap(v.mem)
	v.mem = nil
	if err != nil {
		return fmt.Errorf("memfd view close: %w", err)
	}
	return nil
}
