package idlepause

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

func TestTraceGolden(t *testing.T) {
	trs, err := policytest.LoadNamedTraces("sweagent_pydicom__pydicom-1458.jsonl")
	if err != nil {
		t.Fatalf("the repository's traces: %v", err)
	}
	h := policytest.New(t, New(), map[string]any{"idle_after": "2m", "lease_ttl": "10m", "renew_before": "3m", "expect_back_within": "30m"})
	// The user steps away twice: 15 minutes after turn 3 (renewed, back
	// in time), 50 minutes after turn 7 (given up on).
	gap := func(turn int) time.Duration {
		switch turn {
		case 3:
			return 15 * time.Minute
		case 7:
			return 50 * time.Minute
		}
		return 20 * time.Second
	}
	res, err := policytest.Replay(h, trs[0], policytest.ReplayOptions{Gap: gap, TickEvery: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	v := res.Stats.ByVerb
	if v["Pause"] != 2 || v["Resume"] != 1 || v["RenewLease"] < 1 {
		t.Fatalf("verbs %v: want 2 pauses, 1 resume (the second lease lapses), renewals", v)
	}
	policytest.Golden(t, filepath.Join("testdata", "sweagent-idle.golden"), res.JSON())
}

func TestSharedPagesStayHot(t *testing.T) {
	h := policytest.New(t, New(), map[string]any{"idle_after": "1m"})
	t0 := time.Unix(1700000000, 0)
	req := func(s string, at time.Time, blocks ...uint64) {
		h.Observe(policy.Observation{Kind: policy.KindRequestStarted, Session: s, Time: at, Started: &policy.RequestStarted{BlockHashes: blocks}})
	}
	req("a", t0, 1, 2, 3)
	req("b", t0.Add(2*time.Minute), 1, 2, 9)
	ds := h.Observe(policy.Observation{Kind: policy.KindTick, Time: t0.Add(2 * time.Minute), Tick: &policy.Tick{}})
	if len(ds) != 1 {
		t.Fatalf("directives %v: want one pause", ds)
	}
	p := ds[0].(directive.Pause)
	if len(p.BlockHashes) != 1 || p.BlockHashes[0] != 3 {
		t.Fatalf("paused %v: want only page 3 (1 and 2 are b's too)", p.BlockHashes)
	}
	// a returns: resumed.
	ds = h.Observe(policy.Observation{Kind: policy.KindRequestStarted, Session: "a", Time: t0.Add(3 * time.Minute), Started: &policy.RequestStarted{}})
	if len(ds) != 1 || ds[0].(directive.Resume).LeaseID != p.LeaseID {
		t.Fatalf("directives %v: want Resume of %s", ds, p.LeaseID)
	}
}
