package scenario

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const realModelSample = `{"scenario":"real-model","params":{"model":"SmolLM2-135M-Instruct","edit":{"span":[10,20]}},
"arms":{"full_prefill":{"ttft_ms":800,"prompt_tokens":4096,"prefill_tokens":4096,"runs_ms":[800,812.5]},
"kvpilot_prefix":{"ttft_ms":40,"cached_tokens":4080,"prompt_tokens":4096,"prefill_tokens":16},
"reprefill_edit":{"ttft_ms":700,"prefill_tokens":3500},
"kvpilot_splice":{"ttft_ms":60,"prefill_tokens":120}},
"checks":{"prefix_logit_rel_diff":1.6e-6,"prefix_top1_equal":true,"splice_vs_reprefill":{"top1_equal":true,"kl":0.004}},
"ratios":{"prefix_ttft_vs_full":0.05},"targets":{"met":true},"first_token_agreement":0.95}`

const spliceQualitySample = `{"scenario":"splice-quality","params":{"model":"SmolLM2-135M-Instruct","cases":2},
"arms":{"control":{"kl_mean":0,"kl_max":0,"top1":1,"recomputed_share":1},
"recompute_deviation_15":{"kl_mean":0.0121,"kl_max":2.4,"top1":0.968,"recomputed_share":0.177},
"no_edit":{"kl_mean":0.0378,"kl_max":6.21,"top1":0.958,"recomputed_share":null}},
"curves":{"guard":[{"point":"max_kl=0.01","recomputed_share":0.1,"kl_mean":0.004,"top1":0.98}],
"deviation":[{"point":"recompute_deviation_5","recomputed_share":0.08,"kl_mean":0.012,"top1":0.96}]},
"cases":[{"name":"t#0@3:truncate"}],
"checks":{"control_max_abs_logit_diff":0,"rotation_cases":2,"rotation_failures":[]},
"targets":{"guard_saved":0.8,"met":false}}`

const vllmSample = `{"scenario":"vllm","params":{"tokens":4000,"rounds":3},"models":{"save-heavy-llama":{
"params":{"tokens":4000,"rounds":3},
"arms":{"no_connector_miss":{"ms_median":900,"ms_min":850,"ms_max":990,"cached_tokens":[0,0,0]},
"connector_hit_fresh_process":{"ms_median":60,"ms_min":55,"ms_max":70,"cached_tokens":[3968,3968,3968]}},
"ratios":{"connector_miss_vs_no_connector_miss":{"median":1.03,"min":1.0,"max":1.05}},
"targets":{"limits":{"connector_miss_vs_no_connector_miss":1.1},"checks":{"connector_miss_vs_no_connector_miss":true},"met":true}}},
"targets":{"met":true},"note":"kept as printed"}`

// A Python driver's report is carried through as it was printed (fields
// the Go side does not know included), tabulated in the order the driver
// gave (arms as rows, nested objects under their path, null as "-"),
// drawn, and refused when it is not the scenario's or has no targets.met.
func TestPyReport(t *testing.T) {
	for _, c := range []struct {
		s      *PyScenario
		sample string
		kept   string
		table  []string
		charts int
	}{
		{RealModel, realModelSample, `"first_token_agreement":0.95`, []string{
			"scenario: real-model", "params: model=SmolLM2-135M-Instruct", "params.edit: span=[10 20]",
			"arms ttft_ms prompt_tokens prefill_tokens runs_ms", "full_prefill 800 4096 4096 [800 812.5]",
			"kvpilot_splice 60 - 120", "checks.splice_vs_reprefill: top1_equal=true kl=0.004",
			"checks: prefix_logit_rel_diff=1.6e-06 prefix_top1_equal=true", "targets: met=true",
		}, 2},
		{SpliceQuality, spliceQualitySample, `"cases":[{"name":"t#0@3:truncate"}]`, []string{
			"recompute_deviation_15 0.0121 2.4 0.968 0.177", "no_edit 0.0378 6.21 0.958 -",
			"curves.guard point recomputed_share kl_mean top1", "1 max_kl=0.01 0.1 0.004 0.98",
			"checks: control_max_abs_logit_diff=0 rotation_cases=2 rotation_failures=[]", "targets: guard_saved=0.8 met=false",
		}, 1},
		{VLLM, vllmSample, `"note":"kept as printed"`, []string{
			"models.save-heavy-llama.arms", "connector_hit_fresh_process 60 55 70 [3968 3968 3968]",
			"connector_miss_vs_no_connector_miss 1.03 1 1.05", "models.save-heavy-llama.targets: met=true",
			"models.save-heavy-llama.targets.limits: connector_miss_vs_no_connector_miss=1.1",
		}, 1},
	} {
		r, err := c.s.parse([]byte(c.sample + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.s.Name, err)
		}
		var out bytes.Buffer
		if err := json.NewEncoder(&out).Encode(r); err != nil || !strings.Contains(out.String(), c.kept) {
			t.Errorf("%s: JSON not passed through (%v): %s", c.s.Name, err, out.String())
		}
		var table bytes.Buffer
		if err := r.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		var lines []string // the table, spaces folded
		for _, l := range strings.Split(table.String(), "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		for _, want := range c.table {
			if !strings.Contains(strings.Join(lines, "\n"), want) {
				t.Errorf("%s: table lacks %q:\n%s", c.s.Name, want, table.String())
			}
		}
		var svg bytes.Buffer
		if charts := r.Charts(); len(charts) != c.charts || WriteSVG(&svg, c.s.Name, charts) != nil ||
			!strings.Contains(svg.String(), "<rect x") && !strings.Contains(svg.String(), "<circle") {
			t.Errorf("%s: %d charts, svg:\n%s", c.s.Name, len(charts), svg.String())
		}
		for _, bad := range []string{``, `[]`, `{"scenario":"pin-flood","targets":{"met":true}}`, `{"scenario":"` + c.s.Name + `","arms":{}}`,
			`{"scenario":"` + c.s.Name + `","targets":{"met":"yes"}}`, `{"scenario":"` + c.s.Name + `","targets":{"met":true}} {}`} {
			if _, err := c.s.parse([]byte(bad)); err == nil {
				t.Errorf("%s: accepted %q", c.s.Name, bad)
			}
		}
	}
}

// TestDriversPathPutsTheTreeFirst: the drivers and the SDK of the
// repository come before the caller's PYTHONPATH (and so before any
// installed kvpilot).
func TestDriversPathPutsTheTreeFirst(t *testing.T) {
	sep := string(os.PathListSeparator)
	if got, want := driversPath("/r", ""), "/r/host/bench/python"+sep+"/r/sdk/python"; got != want {
		t.Fatalf("driversPath = %q, want %q", got, want)
	}
	if got, want := driversPath("/r", "/x"), "/r/host/bench/python"+sep+"/r/sdk/python"+sep+"/x"; got != want {
		t.Fatalf("driversPath = %q, want %q", got, want)
	}
}
