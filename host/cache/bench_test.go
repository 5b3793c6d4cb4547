package cache

import (
	"testing"
	"unsafe"
)

// BenchmarkMatchCommit32K: match + commit of a cached 32K-token prompt at
// page size 64 (512 pages), hashing included. Target ≤ 50 µs/op.
func BenchmarkMatchCommit32K(b *testing.B) {
	w := newMatchCommit(512, 64)
	if err := w.run(0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.run(0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkMatchCommit32KCold: the same with a new prompt every time, so
// all 512 pages are inserted.
func BenchmarkMatchCommit32KCold(b *testing.B) {
	w := newMatchCommit(512, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%64 == 0 {
			b.StopTimer()
			w.ix.Reset()
			b.StartTimer()
		}
		if err := w.run(uint32(1_000_000 + i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
}

// BenchmarkBlockOps: single-block operations on one core (lookup, pin of
// a page and its ancestors, lock, one-page match, unlock, unpin) over 32K
// pages in chains of 8. Target ≥ 2M ops/s.
func BenchmarkBlockOps(b *testing.B) {
	w := newBlockOps(4096, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.round(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*blockOpsPerRound)/b.Elapsed().Seconds(), "blockops/s")
}

func TestRunIndexBench(t *testing.T) {
	if invariantsOn {
		t.Skip("timings are meaningless with the invariant checker on every step")
	}
	r, err := RunIndexBench(16, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.MatchCommitMicros <= 0 && r.MatchCommitColdMicros <= 0 || r.BlockOpsPerSec <= 0 || r.MapOpsPerSec <= 0 {
		t.Fatalf("empty result %+v", r)
	}
	if _, err := RunIndexBench(0, 64, 1); err == nil {
		t.Fatal("zero pages accepted")
	}
}

// MeasureIndexMemory fills an index and reports the heap it holds; a page
// costs at least its node record.
func TestMeasureIndexMemory(t *testing.T) {
	m, err := MeasureIndexMemory(2_000)
	if err != nil {
		t.Fatal(err)
	}
	if m.Pages != 2_000 || m.BytesPerPage < float64(unsafe.Sizeof(node{})) {
		t.Fatalf("index memory %+v: below one node record (%d bytes) per page", m, unsafe.Sizeof(node{}))
	}
	if _, err := MeasureIndexMemory(0); err == nil {
		t.Fatal("zero pages accepted")
	}
}
