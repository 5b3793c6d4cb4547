package scenario

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const realModelSample = `{"scenario":"real-model","params":{"model":"SmolLM2-135M-Instruct"},
"arms":{"full_prefill":{"ttft_ms":800,"prompt_tokens":4096},
"kvpilot_prefix":{"ttft_ms":40,"cached_tokens":4080,"prompt_tokens":4096},
"reprefill_edit":{"ttft_ms":700,"prefill_tokens":3500},
"kvpilot_splice":{"ttft_ms":60,"prefill_tokens":120}},
"checks":{"prefix_max_abs_logit_diff":4e-5,"prefix_logit_rel_diff":1.6e-6,"prefix_top1_equal":true,"splice_layer0_keys_ok":true,"splice_vs_reprefill":{"top1_equal":true,"kl":0.004}},
"targets":{"met":true},"first_token_agreement":0.95}`

// The Go side passes the Python side's report through whole, and refuses
// output that is not one.
func TestRealModelReportRoundTrip(t *testing.T) {
	r, err := parseRealModel([]byte(realModelSample))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Targets.Met || r.Arms["kvpilot_splice"].PrefillTokens != 120 || !r.Checks.SpliceLayer0KeysOK ||
		r.Checks.PrefixLogitRelDiff != 1.6e-6 || !r.Checks.PrefixTop1Equal || r.Checks.SpliceVsReprefill.KL != 0.004 {
		t.Fatalf("parsed %+v", r)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"first_token_agreement":0.95`) || !strings.Contains(string(out), `"ttft_ms":40`) {
		t.Fatalf("round trip lost fields: %s", out)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil || !strings.Contains(table.String(), "kvpilot_splice") || !strings.Contains(table.String(), "0.050x") ||
		!strings.Contains(table.String(), "1.60e-06 of their scale") {
		t.Fatalf("table: %v\n%s", err, table.String())
	}
	for _, bad := range []string{``, `{"scenario":"pin-flood"}`, `{"scenario":"real-model","arms":{}}`} {
		if _, err := parseRealModel([]byte(bad)); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
}
