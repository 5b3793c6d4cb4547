package cuda

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

// The device tier's page copies against the driver's own copy of the same
// bytes from page-locked memory. Each benchmark moves whole pages of a
// Llama-3-8B-like model (32 layers of K and V, 8 KV heads of 128, 16 tokens,
// bf16: 2 MiB) between host memory and the arena, one page per op, and
// reports MB/s. In each group the pinned copy (cuMemAllocHost memory) comes
// first: it is the baseline make gpu-check divides by. The registered arms
// copy from the host tier itself, a memfd pool page-locked with
// cuMemHostRegister as host/pool/tiers opens it on a GPU; the pageable arm
// from Go memory, which the driver stages through its own buffer. Page-major is one copy per page; layer-major (the engine's
// per-layer tensors) one pitched copy per buffer, 32 rows of 32 KiB.
// They skip without a CUDA driver.

const benchPages = 64

func benchLayout() layout.Layout {
	return layout.MHA("bench", 16, layout.BF16, 32, 8, 128, 128, layout.HalfSplit)
}

func benchArena(b *testing.B, arr layout.Arrangement) (*Arena, []pool.Slot) {
	b.Helper()
	ctx := openOrSkip(b)
	l := benchLayout()
	a, err := New(Options{Context: ctx, Layout: &l, Pages: benchPages, Arrangement: arr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	s, err := a.Alloc(nil, benchPages)
	if err != nil {
		b.Fatal(err)
	}
	return a, s
}

// pinned is page-locked host memory of one page, freed with the context.
func pinned(b *testing.B, ctx *cudadrv.Context, n int) []byte {
	b.Helper()
	buf, err := ctx.MemAllocHost(n)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ctx.MemFreeHost(buf) })
	return buf
}

// pageLoop times op over the arena's pages in turn, after one untimed op.
func pageLoop(b *testing.B, pageBytes int, op func(i int) error) {
	b.Helper()
	if err := op(0); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(pageBytes))
	i := 0
	for b.Loop() {
		i = (i + 1) % benchPages
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
}

// hostTier is the host tier as the host opens it on a GPU machine
// (host/pool/tiers): a page-major memfd pool of benchPages pages,
// page-locked for the device; page i is the live view of its slot i, what
// the mover hands the device arena.
func hostTier(b *testing.B, ctx *cudadrv.Context, l *layout.Layout) [][]byte {
	b.Helper()
	h, err := memfd.New(memfd.Options{Tier: tier.Host, Layout: l, Pages: benchPages, Arrangement: layout.PageMajor})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	if err := h.Register(func(m []byte) error { return ctx.HostRegister(m, cudadrv.HostRegisterPortable) }, ctx.HostUnregister); err != nil {
		b.Fatal(err)
	}
	slots, err := h.Alloc(nil, benchPages)
	if err != nil {
		b.Fatal(err)
	}
	pages := make([][]byte, benchPages)
	for i, sl := range slots {
		if pages[i], err = h.PageView(sl); err != nil {
			b.Fatal(err)
		}
	}
	return pages
}

func benchCopies(b *testing.B, in bool) {
	b.Run("pinned", func(b *testing.B) {
		a, _ := benchArena(b, layout.PageMajor)
		buf := pinned(b, a.ctx, a.pb)
		pageLoop(b, a.pb, func(i int) error {
			dev := a.base + cudadrv.DevicePtr(i*a.pb)
			if in {
				return a.ctx.CopyHtoD(dev, buf)
			}
			return a.ctx.CopyDtoH(buf, dev)
		})
	})
	arms := []struct {
		name string
		arr  layout.Arrangement
		reg  bool
	}{
		{"registered-page-major", layout.PageMajor, true},
		{"registered-layer-major", layout.LayerMajor, true},
		{"pageable-page-major", layout.PageMajor, false},
	}
	for _, c := range arms {
		b.Run(c.name, func(b *testing.B) {
			a, s := benchArena(b, c.arr)
			host := make([][]byte, benchPages)
			if c.reg {
				host = hostTier(b, a.ctx, a.lay)
			} else {
				for i := range host {
					host[i] = make([]byte, a.pb)
				}
			}
			pageLoop(b, a.pb, func(i int) error {
				page := host[i]
				if in {
					return a.WritePage(s[i], page)
				}
				return a.ReadPage(s[i], page)
			})
		})
	}
}

// BenchmarkPageIn: host memory into the device arena (a load from the host
// tier).
func BenchmarkPageIn(b *testing.B) { benchCopies(b, true) }

// BenchmarkPageOut: the device arena into host memory (a save or demotion).
func BenchmarkPageOut(b *testing.B) { benchCopies(b, false) }
