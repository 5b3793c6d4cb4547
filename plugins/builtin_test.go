package plugins

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policy/pluginwire"
	"github.com/kvpilot/kvpilot/sdk/policytest"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// procObserver delivers observations synchronously to a real plugin
// process, for replays that compare with the policies' golden files.
type procObserver struct {
	p   *proc
	seq uint64
}

func (o *procObserver) TryObserve(obs policy.Observation) ([]directive.Directive, error) {
	subscribed := false
	for _, k := range o.p.info.Subscriptions {
		subscribed = subscribed || k == obs.Kind
	}
	if !subscribed {
		return nil, nil
	}
	o.seq++
	obs.Seq = o.seq
	po, err := pluginwire.ToProto(obs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := o.p.rpc.Observe(ctx, []*pb.Observation{po})
	if err != nil {
		return nil, err
	}
	if rs[0].Err != nil || len(rs[0].Directives) == 0 {
		return nil, rs[0].Err
	}
	return rs[0].Directives, directive.ValidateTurn(directive.Turn{Directives: rs[0].Directives}, directive.Limits{})
}

// TestBuiltinProcessMatchesGolden runs the truncation built-in as a plugin
// process (`kvpilot policy truncation`, here the test binary) over the
// debug-gym trace: its decisions must equal the golden file the policy's
// own in-process tests produce.
func TestBuiltinProcessMatchesGolden(t *testing.T) {
	trs, err := policytest.LoadNamedTraces("debuggym_debug_gym.jsonl")
	if err != nil {
		t.Fatalf("the repository's traces: %v", err)
	}
	want, err := os.ReadFile("../policies/truncation/testdata/leyline-debuggym.golden")
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, nil, nil)
	p, err := r.launch(context.Background(), config.Policy{Name: "trunc", Builtin: "truncation",
		Params: map[string]any{"older_than": 2, "max_chars": 200}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.client.Kill()
	res, err := policytest.Replay(&procObserver{p: p}, trs[0], policytest.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.JSON(), want) {
		t.Fatalf("the truncation plugin process decided differently from its golden file")
	}
}
