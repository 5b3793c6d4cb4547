package scenario

import (
	"bytes"
	"strings"
	"testing"
)

const vllmSample = `{"scenario":"vllm","params":{"tokens":4000,"rounds":3},"models":{"save-heavy-llama":{
"params":{"tokens":4000,"rounds":3},
"arms":{"no_connector_miss":{"ms_median":900,"ms_min":850,"ms_max":990,"cached_tokens":[0,0,0]},
"connector_miss":{"ms_median":930,"ms_min":880,"ms_max":1000,"cached_tokens":[0,0,0]},
"connector_hit_fresh_process":{"ms_median":60,"ms_min":55,"ms_max":70,"cached_tokens":[3968,3968,3968]},
"vllm_prefix_hit":{"ms_median":50,"ms_min":45,"ms_max":52,"cached_tokens":[3968,3968,3968]},
"connector_hit_after_restart":{"ms_median":910,"ms_min":900,"ms_max":950,"cached_tokens":[0,0,0]}},
"ratios":{"connector_miss_vs_no_connector_miss":{"median":1.03,"min":1.0,"max":1.05}},
"targets":{"limits":{"connector_miss_vs_no_connector_miss":1.1},"checks":{"connector_miss_vs_no_connector_miss":true},"met":true}}},
"targets":{"met":true},"note":"kept as printed"}`

// TestVLLMReport: the Python side's JSON is checked, printed back as it
// came (fields the Go side does not know included) and tabulated.
func TestVLLMReport(t *testing.T) {
	r, err := parseVLLM([]byte(vllmSample))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Targets.Met || r.Models["save-heavy-llama"].Arms["connector_hit_fresh_process"].CachedTokens[0] != 3968 {
		t.Fatalf("%+v", r)
	}
	b, _ := r.MarshalJSON()
	if !strings.Contains(string(b), `"note":"kept as printed"`) {
		t.Fatalf("JSON not passed through: %s", b)
	}
	var tab bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"connector_hit_after_restart", "connector_miss_vs_no_connector_miss  1.030", "<= 1.10", "targets met: true"} {
		if !strings.Contains(tab.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, tab.String())
		}
	}
	if len(r.Charts()) != 1 {
		t.Fatal("one chart per model")
	}
	for _, bad := range []string{``, `{"scenario":"tiers"}`, `{"scenario":"vllm","models":{}}`,
		`{"scenario":"vllm","models":{"m":{"arms":{"no_connector_miss":{}}}}}`} {
		if _, err := parseVLLM([]byte(bad)); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
}
