package cache_test

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/cachebench"
)

// The workloads live in host/bench/cachebench, shared with `kvpilot bench
// index`; the benchmarks stay here, beside the index they measure.

// BenchmarkMatchCommit32K: match + commit of a cached 32K-token prompt at
// page size 64 (512 pages), hashing included. Target ≤ 50 µs/op.
func BenchmarkMatchCommit32K(b *testing.B) {
	w := cachebench.NewMatchCommit(512, 64)
	if err := w.Run(0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Run(0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkMatchCommit32KCold: the same with a new prompt every time, so
// all 512 pages are inserted.
func BenchmarkMatchCommit32KCold(b *testing.B) {
	w := cachebench.NewMatchCommit(512, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%64 == 0 {
			b.StopTimer()
			w.Reset()
			b.StartTimer()
		}
		if err := w.Run(uint32(1_000_000 + i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkBlockOps: single-block operations on one core (lookup, pin of
// a page and its ancestors, lock, one-page match, unlock, unpin) over 32K
// pages in chains of 8. Target ≥ 2M ops/s.
func BenchmarkBlockOps(b *testing.B) {
	w := cachebench.NewBlockOps(4096, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Round(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*cachebench.BlockOpsPerRound)/b.Elapsed().Seconds(), "blockops/s")
}
