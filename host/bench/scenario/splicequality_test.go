package scenario

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func spliceQualitySample(t *testing.T) []byte {
	t.Helper()
	arms := map[string]any{}
	for _, a := range spliceQualityArms {
		arm := map[string]any{"kl_mean": 0.01, "kl_max": 0.2, "top1": 0.95, "first_top1": 0.9, "ppl_ratio": 1.01,
			"recomputed_share": 0.1, "compute_share": 0.12}
		if a == "no_edit" {
			arm["recomputed_share"], arm["compute_share"] = nil, nil
		}
		arms[a] = arm
	}
	b, err := json.Marshal(map[string]any{
		"scenario": "splice-quality",
		"params":   map[string]any{"model": "SmolLM2-135M-Instruct", "cases": 2},
		"arms":     arms,
		"curves": map[string]any{
			"guard":     []any{map[string]any{"point": "max_kl=0.01", "recomputed_share": 0.1, "kl_mean": 0.004, "top1": 0.98}},
			"deviation": []any{map[string]any{"point": "recompute_deviation_5", "recomputed_share": 0.08, "kl_mean": 0.012, "top1": 0.96}},
		},
		"cases":   []any{map[string]any{"name": "t#0@3:truncate"}},
		"checks":  map[string]any{"control_max_abs_logit_diff": 0, "rotation_cases": 2, "rotation_failures": []any{}},
		"targets": map[string]any{"guard_saved": 0.8, "guard_met": true, "curve_met": true, "met": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The Go side passes the Python side's report through whole, prints its
// table, draws its curves, and refuses output that is not one.
func TestSpliceQualityReport(t *testing.T) {
	r, err := parseSpliceQuality(spliceQualitySample(t))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Targets.Met || r.Arms["no_edit"].RecomputedShare != nil || *r.Arms["guard"].RecomputedShare != 0.1 {
		t.Fatalf("parsed %+v", r)
	}
	out, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(out), `"cases":[{"name":"t#0@3:truncate"}]`) {
		t.Fatalf("round trip lost fields (%v): %s", err, out)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil || !strings.Contains(table.String(), "recompute_deviation_15") || !strings.Contains(table.String(), "guard  ") {
		t.Fatalf("table: %v\n%s", err, table.String())
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, "splice-quality", r.Charts()); err != nil || !strings.Contains(svg.String(), "<polyline") && !strings.Contains(svg.String(), "<circle") {
		t.Fatalf("svg: %v\n%s", err, svg.String())
	}
	for _, bad := range []string{``, `{"scenario":"real-model"}`, `{"scenario":"splice-quality","arms":{}}`} {
		if _, err := parseSpliceQuality([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
