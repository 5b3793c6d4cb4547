package splice

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// ErrUnsupported: the device pool cannot be spliced (a dtype the kernels
// do not rotate, a RoPE config that disagrees with the layout).
var ErrUnsupported = errors.New("splice: unsupported device pool")

// Memory is the device pool's memory as this process addresses it: Host
// for a memfd arena (its mapping), Device for a CUDA arena (its base).
type Memory struct {
	Host   []byte
	Device cudadrv.DevicePtr
}

// Device is the device pool seen by the kernels. The kernels address a
// buffer as rows of one token; the pool as pages of PageSize tokens in one
// of two arrangements. The adapter maps (page slot, token in page) to a
// kernels row:
//
//   - LayerMajor: each (layer, buffer) region is one tensor of
//     slots·PageSize rows, so one kernels layout covers the whole arena with
//     a buffer per (layer, buffer) and row = slot·PageSize + token.
//   - PageMajor: a page is contiguous and its (layer, buffer) segments are
//     PageSize rows each, so a kernels layout of PageSize rows describes one
//     page, and the arena of page s is the page's bytes; row = token. Moves
//     between pages are a Copy then a Rotate of the destination rows.
type Device struct {
	Pool   pool.Memory
	Engine kernels.Engine

	lay   *layout.Layout
	arr   layout.Arrangement
	pages int
	mem   Memory
	kl    *kernels.Layout // the whole arena (LayerMajor) or one page (PageMajor)

	mu                      sync.Mutex // guards the scratch lists
	src, dst, deltas, slots []int
}

// NewDevice adapts the device pool p, whose memory is mem, for engine eng.
// rc is the model's RoPE config (from the engine's registration); its Dim
// and pairing must agree with the layout's RoPE slice.
func NewDevice(p pool.Memory, mem Memory, rc rope.Config, eng kernels.Engine) (*Device, error) {
	if p == nil || eng == nil {
		return nil, fmt.Errorf("splice device: pool and kernels engine are required")
	}
	if (mem.Host == nil) == (mem.Device == 0) {
		return nil, fmt.Errorf("splice device: give exactly one of host memory or a device pointer")
	}
	lay := p.Layout()
	h := p.Handle()
	d := &Device{Pool: p, Engine: eng, lay: lay, arr: h.Arrangement, pages: h.Slots, mem: mem}
	if mem.Host != nil && int64(len(mem.Host)) < int64(lay.PageBytes())*int64(d.pages) {
		return nil, fmt.Errorf("splice device: %d bytes of memory for %d pages of %d bytes", len(mem.Host), d.pages, lay.PageBytes())
	}
	spec, err := kernelSpec(lay, d.arr, d.pages, rc)
	if err != nil {
		return nil, err
	}
	if d.kl, err = kernels.NewLayout(spec); err != nil {
		return nil, fmt.Errorf("splice device: %w", err)
	}
	return d, nil
}

// kernelSpec describes the pool's memory as a kernels layout (see Device).
func kernelSpec(lay *layout.Layout, arr layout.Arrangement, pages int, rc rope.Config) (kernels.LayoutSpec, error) {
	var dt kernels.DType
	switch lay.DType {
	case layout.FP32:
		dt = kernels.F32
	case layout.BF16:
		dt = kernels.BF16
	case layout.FP16:
		dt = kernels.F16
	case layout.FP8E4M3:
		dt = kernels.E4M3
	case layout.FP8E5M2:
		dt = kernels.E5M2
	default:
		return kernels.LayoutSpec{}, fmt.Errorf("splice device: dtype %v cannot be rotated by the kernels: %w", lay.DType, ErrUnsupported)
	}
	esz := lay.DType.Size()
	spec := kernels.LayoutSpec{DType: dt, Rope: rc}
	if r := lay.Rope; r != nil {
		want := rope.HalfSplit
		if r.Style == layout.Interleaved {
			want = rope.Interleaved
		}
		if rc.Dim != r.Dim || rc.Pairing != want {
			return spec, fmt.Errorf("splice device: RoPE config (dim %d, %v) disagrees with the layout's slice (dim %d, %v): %w",
				rc.Dim, rc.Pairing, r.Dim, r.Style, ErrUnsupported)
		}
	}
	switch arr {
	case layout.LayerMajor:
		spec.Slots = pages * lay.PageSize
	case layout.PageMajor:
		spec.Slots = lay.PageSize
	default:
		return spec, fmt.Errorf("splice device: arrangement %v: %w", arr, ErrUnsupported)
	}
	for l := 0; l < lay.Layers; l++ {
		for b, buf := range lay.Buffers {
			bs := kernels.BufferSpec{Name: fmt.Sprintf("L%d.%s", l, buf.Name), RowBytes: lay.RowBytes(b)}
			if arr == layout.LayerMajor {
				bs.Offset = lay.ArenaRegionOffset(pages, l, b)
			} else {
				bs.Offset = lay.PageSegmentOffset(l, b)
			}
			if r := lay.Rope; r != nil && r.Buffer == b {
				bs.Rope = &kernels.RopeSlice{Offset: r.Offset * esz, Heads: buf.Heads, HeadStride: buf.HeadDim * esz}
			}
			spec.Buffers = append(spec.Buffers, bs)
		}
	}
	return spec, nil
}

// Layout is the pool's page layout.
func (d *Device) Layout() *layout.Layout { return d.lay }

// Arrangement is how the pool places pages.
func (d *Device) Arrangement() layout.Arrangement { return d.arr }

// TokenBytes is the bytes one token occupies over every layer and buffer.
func (d *Device) TokenBytes() int { return d.lay.TokenBytes() }

// RopeBytes is the RoPE-slice bytes one token holds over every layer
// (both kernels layouts hold every layer's buffers).
func (d *Device) RopeBytes() int { return d.kl.RopeBytesPerSlot() }

// arena returns the kernels arena for page slot s (PageMajor) or the whole
// arena (LayerMajor, s ignored).
func (d *Device) arena(s uint64) kernels.Arena {
	if d.arr == layout.LayerMajor {
		return kernels.Arena{Layout: d.kl, Host: d.mem.Host, Device: d.mem.Device}
	}
	pb := uint64(d.lay.PageBytes())
	if d.mem.Host != nil {
		return kernels.Arena{Layout: d.kl, Host: d.mem.Host[s*pb : (s+1)*pb : (s+1)*pb]}
	}
	return kernels.Arena{Layout: d.kl, Device: d.mem.Device + cudadrv.DevicePtr(s*pb)}
}

func (d *Device) checkSlot(s uint64) error {
	if s >= uint64(d.pages) {
		return fmt.Errorf("splice: device slot %d outside the %d-page pool: %w", s, d.pages, cache.ErrSpliceStale)
	}
	return nil
}

// Execute writes a plan's bytes: row runs into fresh pages (gather →
// rotate → scatter) and in-place rotations of re-linked pages. The index
// must not change while it runs (the caller holds the index lock), and no
// running request reads the pages it writes (fresh slots, and exclusive
// pages, which no request holds).
func (d *Device) Execute(p *cache.SplicePlan) error {
	for i := range p.Pages {
		if err := d.checkSlot(p.Pages[i].Loc); err != nil {
			return err
		}
	}
	for _, r := range p.Runs {
		if err := d.checkSlot(r.SrcLoc); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.arr == layout.LayerMajor {
		return d.executeLayerMajor(p)
	}
	return d.executePageMajor(p)
}

func (d *Device) executeLayerMajor(p *cache.SplicePlan) error {
	P := d.lay.PageSize
	a := d.arena(0)
	src, dst, deltas := d.src[:0], d.dst[:0], d.deltas[:0]
	for _, r := range p.Runs {
		s0 := int(r.SrcLoc)*P + r.SrcRow
		d0 := int(p.Pages[r.Page].Loc)*P + r.DstRow
		for k := 0; k < r.Rows; k++ {
			src, dst, deltas = append(src, s0+k), append(dst, d0+k), append(deltas, r.Delta)
		}
	}
	d.src, d.dst, d.deltas = src, dst, deltas
	if len(src) > 0 {
		if err := d.Engine.GatherRotateScatter(a, src, dst, deltas); err != nil {
			return fmt.Errorf("splice: gather-rotate-scatter of %d rows: %w", len(src), err)
		}
	}
	slots, deltas := d.slots[:0], d.deltas[:0]
	for i := range p.Pages {
		pg := &p.Pages[i]
		if !pg.InPlace || pg.Delta == 0 {
			continue
		}
		for t := 0; t < P; t++ {
			slots, deltas = append(slots, int(pg.Loc)*P+t), append(deltas, pg.Delta)
		}
	}
	d.slots, d.deltas = slots, deltas
	if len(slots) > 0 {
		if err := d.Engine.Rotate(a, slots, deltas); err != nil {
			return fmt.Errorf("splice: in-place rotation of %d rows: %w", len(slots), err)
		}
	}
	return nil
}

func (d *Device) executePageMajor(p *cache.SplicePlan) error {
	P := d.lay.PageSize
	for _, r := range p.Runs {
		src, dst, deltas := d.src[:0], d.dst[:0], d.deltas[:0]
		for k := 0; k < r.Rows; k++ {
			src, dst, deltas = append(src, r.SrcRow+k), append(dst, r.DstRow+k), append(deltas, r.Delta)
		}
		d.src, d.dst, d.deltas = src, dst, deltas
		to := d.arena(p.Pages[r.Page].Loc)
		if err := d.Engine.Copy(to, dst, d.arena(r.SrcLoc), src); err != nil {
			return fmt.Errorf("splice: copy of %d rows from slot %d: %w", r.Rows, r.SrcLoc, err)
		}
		if r.Delta == 0 {
			continue
		}
		if err := d.Engine.Rotate(to, dst, deltas); err != nil {
			return fmt.Errorf("splice: rotation of %d rows in slot %d: %w", r.Rows, p.Pages[r.Page].Loc, err)
		}
	}
	for i := range p.Pages {
		pg := &p.Pages[i]
		if !pg.InPlace || pg.Delta == 0 {
			continue
		}
		slots, deltas := d.slots[:0], d.deltas[:0]
		for t := 0; t < P; t++ {
			slots, deltas = append(slots, t), append(deltas, pg.Delta)
		}
		d.slots, d.deltas = slots, deltas
		if err := d.Engine.Rotate(d.arena(pg.Loc), slots, deltas); err != nil {
			return fmt.Errorf("splice: in-place rotation of slot %d: %w", pg.Loc, err)
		}
	}
	return nil
}
