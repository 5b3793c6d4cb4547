package autopin

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// The five SWE-smith sessions share SWE-agent's system prompt and task
// template: the shared prefix is pinned once three sessions have sent it,
// and unpinned after the sessions end and it cools.
func TestTraceGolden(t *testing.T) {
	trs, err := policytest.LoadNamedTraces("adp_swe-smith_sample_raw.jsonl")
	if err != nil {
		t.Fatalf("the repository's traces: %v", err)
	}
	h := policytest.New(t, New(), map[string]any{"min_hits": 3, "window": "10m", "ttl": "5m"})
	var out []byte
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pins, unpins := 0, 0
	for i, tr := range trs {
		// Sessions start a minute apart and run concurrently in time.
		res, err := policytest.Replay(h, tr, policytest.ReplayOptions{Start: start.Add(time.Duration(i) * time.Minute), MaxRequests: 6})
		if err != nil {
			t.Fatal(err)
		}
		pins += res.Stats.ByVerb["Cache"]
		out = append(out, res.JSON()...)
	}
	// Much later, a tick: the prefix has cooled.
	ds := h.Observe(policy.Observation{Kind: policy.KindTick, Time: start.Add(time.Hour), Tick: &policy.Tick{}})
	for _, d := range ds {
		if c := d.(directive.Cache); !c.Pin {
			unpins++
		}
	}
	if pins == 0 || unpins == 0 {
		t.Fatalf("%d pin directives, %d unpins: want the shared prefix pinned and later unpinned", pins, unpins)
	}
	policytest.Golden(t, filepath.Join("testdata", "swe-smith-shared-prefix.golden"), out)
}

func TestBudgetAndCooling(t *testing.T) {
	h := policytest.New(t, New(), map[string]any{"min_hits": 2, "max_pinned_blocks": 3, "window": "1m"})
	t0 := time.Unix(1700000000, 0)
	// A request is counted when it starts and may pin when it finishes,
	// once its path is committed.
	req := func(s string, at time.Duration, path ...uint64) []directive.Directive {
		if ds := h.Observe(policy.Observation{Kind: policy.KindRequestStarted, Session: s, Time: t0.Add(at), Started: &policy.RequestStarted{BlockHashes: path}}); len(ds) != 0 {
			t.Fatalf("directives at a request's start, before its pages are committed: %v", ds)
		}
		return h.Observe(policy.Observation{Kind: policy.KindRequestFinished, Session: s, Time: t0.Add(at + time.Millisecond), Finished: &policy.RequestFinished{BlockHashes: path}})
	}
	if ds := req("a", 0, 1, 2, 3, 4); len(ds) != 0 {
		t.Fatalf("pinned after one session: %v", ds)
	}
	if ds := req("a", time.Second, 1, 2, 3, 4, 5); len(ds) != 0 {
		t.Fatalf("one session's own history counted twice: %v", ds)
	}
	ds := req("b", 2*time.Second, 1, 2, 3, 7)
	if len(ds) != 1 || ds[0].(directive.Cache).BlockHashes[0] != 3 {
		t.Fatalf("directives %v: want block 3 (the deepest shared) pinned", ds)
	}
	// Over budget: 1,2,3 are pinned; 7 and 8 would make 5 > 3.
	if ds := req("c", 3*time.Second, 1, 2, 3, 7, 8); len(ds) != 0 {
		t.Fatalf("pinned past the budget: %v", ds)
	}
	if ds := req("d", 4*time.Second, 1, 2, 3, 7, 8); len(ds) != 0 {
		t.Fatalf("pinned past the budget: %v", ds)
	}
	ds = h.Observe(policy.Observation{Kind: policy.KindTick, Time: t0.Add(2 * time.Minute), Tick: &policy.Tick{}})
	if len(ds) != 1 || ds[0].(directive.Cache).Pin {
		t.Fatalf("directives %v: want the cooled pin released", ds)
	}
}
