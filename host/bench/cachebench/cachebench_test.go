package cachebench_test

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/cachebench"
	"github.com/kvpilot/kvpilot/host/cache"
)

func TestRun(t *testing.T) {
	if invariantsOn {
		t.Skip("-tags invariants runs the checker on every step, which makes the timings meaningless: run without the tag (go test -run TestRun ./host/bench/cachebench/)")
	}
	r, err := cachebench.Run(16, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.MatchCommitMicros <= 0 && r.MatchCommitColdMicros <= 0 || r.BlockOpsPerSec <= 0 || r.MapOpsPerSec <= 0 {
		t.Fatalf("empty result %+v", r)
	}
	if _, err := cachebench.Run(0, 64, 1); err == nil {
		t.Fatal("zero pages accepted")
	}
}

// MeasureMemory fills an index and reports the heap it holds; a page
// costs at least its record.
func TestMeasureMemory(t *testing.T) {
	m, err := cachebench.MeasureMemory(2_000)
	if err != nil {
		t.Fatal(err)
	}
	if m.Pages != 2_000 || m.BytesPerPage < float64(cache.PageRecordBytes) {
		t.Fatalf("index memory %+v: below one page record (%d bytes) per page", m, cache.PageRecordBytes)
	}
	if _, err := cachebench.MeasureMemory(0); err == nil {
		t.Fatal("zero pages accepted")
	}
}
