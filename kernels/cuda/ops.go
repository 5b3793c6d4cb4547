package cuda

import (
	"fmt"

	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

// Rotate implements kernels.Engine.
func (e *Engine) Rotate(a kernels.Arena, slots, deltas []int) error {
	if a.Layout == nil {
		return fmt.Errorf("rotate: arena has no layout: %w", kernels.ErrLayout)
	}
	if !a.OnDevice() {
		return fmt.Errorf("rotate: arena is not device memory: %w", kernels.ErrMemory)
	}
	l := a.Layout
	if err := kernels.CheckRotate(l, slots, deltas); err != nil {
		return err
	}
	if l.Rotary() == nil || len(slots) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	launch, err := e.stageRotate(a, slots, deltas)
	if err != nil {
		return err
	}
	return launch()
}

// stageRotate stages a checked rotation's arguments and returns its launch,
// which waits for the kernel. The launch may run again while the engine
// runs nothing else (the kernel benchmark times it alone).
func (e *Engine) stageRotate(a kernels.Arena, slots, deltas []int) (func() error, error) {
	l := a.Layout
	d, err := e.layout(l)
	if err != nil {
		return nil, err
	}
	e.indexDeltas(deltas)
	idxBytes, tabBytes := e.deltaSizes(l.Rotary())
	secs, p, err := e.reserve(4*len(slots), idxBytes, tabBytes, tabBytes)
	if err != nil {
		return nil, fmt.Errorf("rotate: %w", err)
	}
	putInt32s(secs[0], slots)
	e.putDeltas(l.Rotary(), secs[1], secs[2], secs[3])
	if err := e.uploadArgs(); err != nil {
		return nil, fmt.Errorf("rotate: upload arguments: %w", err)
	}
	dim := l.Rotary().Dim()
	// A thread rotates 16 bytes at a time where the slices allow it
	// (kvkernels.cu): of each half of a head (half-split) or of the whole
	// head (interleaved), so a row needs that many threads.
	span := dim / 2
	if interleaved(l) == 1 {
		span = dim
	}
	block := blockShape(max(1, d.maxHeads*span/(16/l.DType().Size())))
	g, err := grid(len(slots), block, d.nRope)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := e.ctx.Launch(e.rotate[l.DType()], g, block, 0, 0,
			cudadrv.ArgPtr(a.Device), cudadrv.ArgPtr(d.bufs), cudadrv.ArgPtr(d.ropeBufs),
			cudadrv.ArgPtr(p[0]), cudadrv.ArgPtr(p[1]), cudadrv.ArgPtr(p[2]), cudadrv.ArgPtr(p[3]),
			cudadrv.ArgI32(int32(len(slots))), cudadrv.ArgI32(int32(dim)), cudadrv.ArgI32(interleaved(l))); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
		return e.ctx.StreamSynchronize(0)
	}, nil
}

// GatherRotateScatter implements kernels.Engine.
func (e *Engine) GatherRotateScatter(a kernels.Arena, src, dst, deltas []int) error {
	if a.Layout == nil {
		return fmt.Errorf("gather-rotate-scatter: arena has no layout: %w", kernels.ErrLayout)
	}
	if !a.OnDevice() {
		return fmt.Errorf("gather-rotate-scatter: arena is not device memory: %w", kernels.ErrMemory)
	}
	stage, err := kernels.CheckGatherRotateScatter(a.Layout, src, dst, deltas)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moveRows(a.Device, a.Layout, dst, a.Device, a.Layout, src, deltas, stage)
}

// Copy implements kernels.Engine. Host arenas must be pinned and
// device-mapped by this engine's context; two host arenas are copied by the
// CPU engine.
func (e *Engine) Copy(dst kernels.Arena, dstSlots []int, src kernels.Arena, srcSlots []int) error {
	if dst.Host != nil && src.Host != nil {
		return e.cpu.Copy(dst, dstSlots, src, srcSlots)
	}
	if dst.Layout == nil || src.Layout == nil {
		return fmt.Errorf("copy: arena has no layout: %w", kernels.ErrLayout)
	}
	dp, err := e.address(dst)
	if err != nil {
		return fmt.Errorf("copy destination: %w", err)
	}
	sp, err := e.address(src)
	if err != nil {
		return fmt.Errorf("copy source: %w", err)
	}
	same := dp == sp
	if same && dst.Layout != src.Layout {
		return fmt.Errorf("copy: one arena under two layouts: %w", kernels.ErrArgs)
	}
	stage, err := kernels.CheckMove("copy", dst.Layout, dstSlots, src.Layout, srcSlots, nil, same)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moveRows(dp, dst.Layout, dstSlots, sp, src.Layout, srcSlots, nil, stage)
}

// address is the device-visible base of an arena.
func (e *Engine) address(a kernels.Arena) (cudadrv.DevicePtr, error) {
	if a.OnDevice() {
		return a.Device, nil
	}
	if a.Host == nil {
		return 0, fmt.Errorf("arena has no memory: %w", kernels.ErrMemory)
	}
	if int64(len(a.Host)) < a.Layout.ArenaBytes() {
		return 0, fmt.Errorf("arena of %d bytes is smaller than its layout's %d: %w", len(a.Host), a.Layout.ArenaBytes(), kernels.ErrLayout)
	}
	p, err := e.ctx.HostDevicePtr(a.Host)
	if err != nil {
		return 0, fmt.Errorf("host arena must be pinned and mapped by this context: %v: %w", err, kernels.ErrMemory)
	}
	return p, nil
}

// moveRows runs kv_move, staging through a temporary device arena when a
// destination could clobber a source another pair still reads.
func (e *Engine) moveRows(dp cudadrv.DevicePtr, dl *kernels.Layout, dst []int, sp cudadrv.DevicePtr, sl *kernels.Layout, src []int, deltas []int, stage bool) error {
	n := len(src)
	if n == 0 {
		return nil
	}
	if !stage {
		return e.launchMove(dp, dl, nil, dst, sp, sl, nil, src, deltas)
	}
	// Temporary arena: buffer b packed at n*sum(rowBytes of buffers < b).
	offsets := make([]int64, sl.NumBuffers())
	var off int64
	for b := range offsets {
		offsets[b] = off
		off += int64(n) * int64(sl.Buffer(b).RowBytes)
	}
	tmp, err := e.ctx.MemAlloc(int(off))
	if err != nil {
		return fmt.Errorf("stage %d rows: %w", n, err)
	}
	defer e.ctx.MemFree(tmp)
	seq := make([]int, n)
	for i := range seq {
		seq[i] = i
	}
	if err := e.launchMove(tmp, sl, offsets, seq, sp, sl, nil, src, nil); err != nil {
		return err
	}
	return e.launchMove(dp, dl, nil, dst, tmp, sl, offsets, seq, deltas)
}

// launchMove launches one kv_move; dOff/sOff override buffer offsets for
// temporary arenas; deltas nil means copy without rotation.
func (e *Engine) launchMove(dp cudadrv.DevicePtr, dl *kernels.Layout, dOff []int64, dst []int, sp cudadrv.DevicePtr, sl *kernels.Layout, sOff []int64, src []int, deltas []int) error {
	idxBytes, tabBytes := 0, 0
	rotating := deltas != nil && dl.Rotary() != nil
	if rotating {
		e.indexDeltas(deltas)
		idxBytes, tabBytes = e.deltaSizes(dl.Rotary())
	}
	secs, p, err := e.reserve(bufDescBytes*dl.NumBuffers(), bufDescBytes*sl.NumBuffers(), 4*len(dst), 4*len(src),
		idxBytes, tabBytes, tabBytes)
	if err != nil {
		return fmt.Errorf("move rows: %w", err)
	}
	putDescs(secs[0], dl, dOff)
	putDescs(secs[1], sl, sOff)
	putInt32s(secs[2], dst)
	putInt32s(secs[3], src)
	if rotating {
		e.putDeltas(dl.Rotary(), secs[4], secs[5], secs[6])
	}
	if err := e.uploadArgs(); err != nil {
		return fmt.Errorf("move rows: upload arguments: %w", err)
	}
	word := wordBytes(dp, dl, dOff, sp, sl, sOff)
	maxRow := 0
	for b := 0; b < dl.NumBuffers(); b++ {
		maxRow = max(maxRow, dl.Buffer(b).RowBytes/word)
	}
	block := blockShape(maxRow)
	g, err := grid(len(src), block, dl.NumBuffers())
	if err != nil {
		return err
	}
	dim := 0
	if dl.Rotary() != nil {
		dim = dl.Rotary().Dim()
	}
	if err := e.ctx.Launch(e.move[dl.DType()], g, block, 0, 0,
		cudadrv.ArgPtr(dp), cudadrv.ArgPtr(p[0]), cudadrv.ArgPtr(sp), cudadrv.ArgPtr(p[1]),
		cudadrv.ArgPtr(p[2]), cudadrv.ArgPtr(p[3]), cudadrv.ArgPtr(p[4]), cudadrv.ArgPtr(p[5]), cudadrv.ArgPtr(p[6]),
		cudadrv.ArgI32(int32(len(src))), cudadrv.ArgI32(int32(dim)), cudadrv.ArgI32(interleaved(dl)), cudadrv.ArgI32(int32(word))); err != nil {
		return fmt.Errorf("move rows: %w", err)
	}
	return e.ctx.StreamSynchronize(0)
}

// wordBytes is the widest copy unit (16, 4, 2 or 1 bytes: an fp8 row may
// be odd) that divides both bases, every buffer offset and every row size.
func wordBytes(dp cudadrv.DevicePtr, dl *kernels.Layout, dOff []int64, sp cudadrv.DevicePtr, sl *kernels.Layout, sOff []int64) int {
	g := uint64(dp) | uint64(sp)
	for _, side := range []struct {
		l   *kernels.Layout
		off []int64
	}{{dl, dOff}, {sl, sOff}} {
		for b := 0; b < side.l.NumBuffers(); b++ {
			buf := side.l.Buffer(b)
			o := buf.Offset
			if side.off != nil {
				o = side.off[b]
			}
			g |= uint64(o) | uint64(buf.RowBytes)
		}
	}
	switch {
	case g%16 == 0:
		return 16
	case g%4 == 0:
		return 4
	case g%2 == 0:
		return 2
	}
	return 1
}
