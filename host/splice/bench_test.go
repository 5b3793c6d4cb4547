package splice

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// BenchmarkSplice32K splices a 32K-token session (page 16; 4 layers of
// K and V, 2 KV heads of 64 bf16 elements: 2 KiB per token, 64 MiB per
// session) with an edit near the start, so nearly every token moves.
// Iterations alternate a 3-token (or 16-token) delete and the insert that
// restores the length, so the session size is steady without setup.
// moved-B/op counts whole rows written; rotated-B/op the RoPE slices
// turned.
func BenchmarkSplice32K(b *testing.B) {
	for _, bc := range []struct {
		name       string
		start, del int
	}{
		{"unaligned", 100, 3}, // gather→rotate→scatter of every downstream row
		{"aligned", 112, 16},  // whole pages re-link in place, rotated where they are
	} {
		b.Run(bc.name, func(b *testing.B) {
			const P, tokens = 16, 32 << 10
			lay := layout.MHA("bench", P, layout.BF16, 4, 2, 64, 64, layout.HalfSplit)
			pages := 2*tokens/P + 64
			arena, err := memfd.New(memfd.Options{Tier: tier.Device, Layout: &lay, Pages: pages, Arrangement: layout.LayerMajor})
			if err != nil {
				b.Fatal(err)
			}
			defer arena.Close()
			ix, err := cache.New(cache.Config{PageSize: P, Clock: cache.NewManualClock(time.Second),
				Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: pages, High: 1, Low: 1, PinFraction: 0.5}}})
			if err != nil {
				b.Fatal(err)
			}
			dev, err := NewDevice(arena, Memory{Host: arena.Bytes()}, rope.Config{Base: 500000, Dim: 64, Pairing: rope.HalfSplit}, kernels.NewCPU())
			if err != nil {
				b.Fatal(err)
			}
			sess := NewMemorySessions(P, nil)
			free := func(fs []cache.Freed) {
				for _, f := range fs {
					if f.Tier == tier.Device {
						arena.Free(pool.Slot(f.Loc))
					}
				}
			}
			sp, err := New(Config{Index: guarded.New(ix), Device: dev, Sessions: sess, Free: free,
				Fill: func(context.Context, FillOrder) (FillResult, error) { return FillResult{}, nil }})
			if err != nil {
				b.Fatal(err)
			}
			toks := seqTokens(7, tokens)
			h := blockid.Compute(toks, P, blockid.Salt{Namespace: "t"})
			slots, err := arena.Alloc(nil, len(h.Sequence))
			if err != nil {
				b.Fatal(err)
			}
			locs := make([]uint64, len(slots))
			for i, s := range slots {
				locs[i] = uint64(s)
			}
			var cr cache.CommitResult
			if err := ix.Commit("t", h, locs, &cr); err != nil {
				b.Fatal(err)
			}
			sess.Put(Session{ID: "s", Tenant: "t", Tokens: toks, Cached: tokens})
			removed := toks[bc.start : bc.start+bc.del]
			var moved, rotated int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := Edit{Start: bc.start, End: bc.start + bc.del}
				if i%2 == 1 {
					e = Edit{Start: bc.start, End: bc.start, Replacement: removed}
				}
				res, err := sp.Splice(context.Background(), "s", []Edit{e})
				if err != nil {
					b.Fatal(err)
				}
				moved += res.MovedBytes
				rotated += res.RotatedBytes
			}
			b.ReportMetric(float64(moved)/float64(b.N), "moved-B/op")
			b.ReportMetric(float64(rotated)/float64(b.N), "rotated-B/op")
		})
	}
}
