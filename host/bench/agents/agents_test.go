package agents

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// The reference engine's form, short: four sessions of four requests at
// once through the front door, every arm. Every request is answered, the
// kvpilot arms hit more than the small engine alone, and the host's tiers
// stay within their capacities.
func TestRefengineForm(t *testing.T) {
	traces, err := scenario.LoadTraces(scenario.TraceDebugGym, scenario.TraceSWEAgent)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Params{Sessions: 4, Turns: 4, Traces: traces}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(rep, "", " ")
	t.Logf("%s", b)
	for _, name := range Arms {
		a := rep.Arms[name]
		if a.Requests != 16 || a.Failed != 0 {
			t.Errorf("%s: %d requests, %d failed (%v): want 16, none", name, a.Requests, a.Failed, a.FirstErrors)
		}
		for tier, peak := range a.Host.PeakPages {
			if c, ok := a.Host.CapacityPages[tier]; ok && peak > c {
				t.Errorf("%s: %s tier peaked at %d pages, over its %d", name, tier, peak, c)
			}
		}
	}
	if s, k := rep.Arms[ArmSmall].CachedTokens, rep.Arms[ArmKvpilot].CachedTokens; k <= s {
		t.Errorf("kvpilot arm cached %d tokens, engine-small %d: want more", k, s)
	}
}
