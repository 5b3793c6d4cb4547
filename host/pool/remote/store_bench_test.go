package remote

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// benchLayout is a Llama-3-8B-like page of 16 tokens: 2 MiB, the size
// `kvpilot bench tiers` moves.
func benchLayout() *layout.Layout {
	l := layout.MHA("bench-llama-3-8b", 16, layout.BF16, 32, 8, 128, 128, layout.HalfSplit)
	return &l
}

// BenchmarkStore puts and gets 2 MiB pages through the Store on each
// backend, one call at a time and from several goroutines at once (as the
// mover's workers call it). `kvpilot bench tiers` sets the same calls
// beside each backend's raw baseline.
func BenchmarkStore(b *testing.B) {
	const pages = 16
	for _, bc := range backendCases() {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			open, _ := bc.setup(b, ctx)
			s := open(benchLayout())
			pb := s.Layout().PageBytes()
			src := make([][]byte, pages)
			for i := range src {
				src[i] = page(pb, byte(i))
				if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: uint64(i)}}, src[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("put", func(b *testing.B) {
				b.SetBytes(int64(pb))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: uint64(i % pages)}}, src[i%pages]); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("get", func(b *testing.B) {
				b.SetBytes(int64(pb))
				b.ReportAllocs()
				dst := make([]byte, pb)
				for i := 0; b.Loop(); i++ {
					if err := s.Get(ctx, pool.Key{Seq: uint64(i % pages)}, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("get-parallel", func(b *testing.B) {
				b.SetBytes(int64(pb))
				b.ReportAllocs()
				var next atomic.Uint64
				b.RunParallel(func(p *testing.PB) {
					dst := make([]byte, pb)
					for p.Next() {
						if err := s.Get(ctx, pool.Key{Seq: next.Add(1) % pages}, dst); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}
