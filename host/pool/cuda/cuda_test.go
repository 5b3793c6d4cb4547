package cuda

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

func openOrSkip(t testing.TB) *cudadrv.Context {
	t.Helper()
	d, err := cudadrv.Load()
	if err != nil {
		if !errors.Is(err, cudadrv.ErrNoDriver) {
			t.Fatalf("cudadrv.Load: %v, want ErrNoDriver when absent", err)
		}
		t.Skipf("no usable CUDA driver (%v): run it on a machine with an NVIDIA GPU and its driver (libcuda.so.1), e.g. make gpu-check", err)
	}
	c, err := d.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDeviceArenaRoundTrip(t *testing.T) {
	ctx := openOrSkip(t)
	l := layout.MHA("m", 16, layout.BF16, 4, 2, 64, 64, layout.HalfSplit)
	for _, arr := range []layout.Arrangement{layout.PageMajor, layout.LayerMajor} {
		a, err := New(Options{Context: ctx, Layout: &l, Pages: 8, Arrangement: arr})
		if err != nil {
			t.Fatal(err)
		}
		pb := l.PageBytes()
		s, err := a.Alloc(nil, 8)
		if err != nil {
			t.Fatal(err)
		}
		for i, slot := range s {
			p := bytes.Repeat([]byte{byte(i + 1)}, pb)
			for j := range p {
				p[j] ^= byte(j)
			}
			if err := a.WritePage(slot, p); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, pb)
		for i, slot := range s {
			if err := a.ReadPage(slot, got); err != nil {
				t.Fatal(err)
			}
			for j := range got {
				if got[j] != byte(i+1)^byte(j) {
					t.Fatalf("%v slot %d byte %d differs", arr, slot, j)
				}
			}
			// A round trip would hide a placement that is wrong both ways:
			// each segment must sit where the engine's view of the arena
			// (ArenaSegmentOffset) reads it.
			var pageOff int
			for layer := range l.Layers {
				for b := range l.Buffers {
					n := l.SegmentBytes(b)
					off := int64(int(slot) * pb)
					if arr == layout.LayerMajor {
						off = l.ArenaSegmentOffset(arr, 8, int(slot), layer, b)
					} else {
						off += int64(pageOff)
					}
					seg := make([]byte, n)
					if err := ctx.CopyDtoH(seg, a.Base()+cudadrv.DevicePtr(off)); err != nil {
						t.Fatal(err)
					}
					for j := range seg {
						if seg[j] != byte(i+1)^byte(pageOff+j) {
							t.Fatalf("%v slot %d layer %d buffer %d: byte %d is not where the engine reads it", arr, slot, layer, b, j)
						}
					}
					pageOff += n
				}
			}
		}
		h := a.Handle()
		if h.Kind != pool.HandleCUDAIPC || len(h.IPC) != 64 {
			t.Fatalf("handle %+v", h)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
