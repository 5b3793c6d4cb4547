package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// A policy confined to tenant t1 sees t1's requests and the host's ticks,
// never t2's requests, and a turn it emits for another tenant (here the
// default tenant, on a tick) is refused before it reaches the sink.
func TestConfinedPolicySeesAndActsForItsTenantsOnly(t *testing.T) {
	rec := &recorder{}
	r := newRuntime(t, rec, nil)
	spec := config.Policy{Name: "mine", Builtin: "echo", Tenants: []string{"t1"}}
	if err := r.Swap(context.Background(), []config.Policy{spec}); err != nil {
		t.Fatal(err)
	}
	other := request("theirs", 0)
	other.Tenant = "t2"
	for _, obs := range []policy.Observation{request("ours", 0), other, {Kind: policy.KindTick, Time: time.Unix(1700000000, 0), Tick: &policy.Tick{Interval: time.Second}}} {
		if err := r.Observe(obs); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()["mine"]
	if st.Accepted != 2 || st.Delivered != 2 {
		t.Fatalf("stats %+v: want t1's request and the tick accepted and delivered, t2's request never offered", st)
	}
	if st.Turns != 2 || st.TurnErrors != 1 {
		t.Fatalf("stats %+v: want 2 turns, the tick's (default tenant) refused", st)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.turns) != 1 || rec.turns[0].Tenant != "t1" {
		t.Fatalf("sink got %+v, want one turn for t1", rec.turns)
	}
	// Changing the tenants is a new spec: a hot swap restarts the policy.
	if sameSpec(spec, config.Policy{Name: "mine", Builtin: "echo", Tenants: []string{"t1", "t2"}}) {
		t.Fatal("a change of tenants must not keep the running instance")
	}
}
