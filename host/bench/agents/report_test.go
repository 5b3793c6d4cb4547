package agents

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func TestQuantiles(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	q := quantilesOf(xs)
	if q.P50 != 50 || q.P95 != 95 || q.P99 != 99 || q.Max != 100 {
		t.Fatalf("%+v, want 50 95 99 100", q)
	}
	if q := quantilesOf([]float64{7}); q.P50 != 7 || q.P99 != 7 {
		t.Fatalf("one sample: %+v", q)
	}
	if q := quantilesOf(nil); q != (Quantiles{}) {
		t.Fatalf("no samples: %+v", q)
	}
}

// Hits resume at the first sample after the restart whose count rose past
// the count the restart left.
func TestFaultResumed(t *testing.T) {
	samples := []HostSample{{T: 1, KvpilotHits: 10}, {T: 2, KvpilotHits: 20}, {T: 3.5, KvpilotHits: 20},
		{T: 4, KvpilotHits: 20}, {T: 5.5, KvpilotHits: 64}}
	f := &FaultReport{AtS: 2.5, RestartedAtS: 3.2}
	f.resumed(samples)
	if f.HitsResumedAfterS != 2.3 {
		t.Fatalf("resumed after %v s, want 2.3", f.HitsResumedAfterS)
	}
	f = &FaultReport{RestartedAtS: 4.5}
	f.resumed(samples[:4])
	if f.HitsResumedAfterS != -1 {
		t.Fatalf("resumed after %v s with no hit after the restart, want -1", f.HitsResumedAfterS)
	}
}

// Edited and failed requests are not held to the reference.
func TestAgreeSkipsEditedAndFailed(t *testing.T) {
	a := summarize([]result{
		{session: 0, turn: 0, chat: scenario.ChatResult{Text: "a"}},
		{session: 0, turn: 1, chat: scenario.ChatResult{Text: "x"}},
		{session: 1, turn: 0, chat: scenario.ChatResult{Text: "b", Cleared: 2}},
		{session: 1, turn: 1, errKind: "transport", err: "connection refused"},
	}, time.Second)
	agree(&a, map[[2]int]string{{0, 0}: "a", {0, 1}: "b", {1, 0}: "b", {1, 1}: "c"})
	if a.Answers.Compared != 2 || a.Answers.Same != 1 || a.Answers.Share != 0.5 {
		t.Fatalf("%+v, want 1 of 2", *a.Answers)
	}
}
