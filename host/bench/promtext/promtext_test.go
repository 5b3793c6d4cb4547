package promtext

import (
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	page := `# HELP x a counter
# TYPE x counter
x_total 3
y_total{outcome="ok",call="Commit"} 2.5
broken{outcome="ok" 1
z_total{a="1"}
vllm:prompt_tokens_total{engine="0",model_name="m"} 1e+03
`
	got, err := Read(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d samples %+v, want 3 (the malformed lines skipped)", len(got), got)
	}
	if got[1].Name != "y_total" || got[1].Label("call") != "Commit" || got[1].Label("outcome") != "ok" || got[1].Value != 2.5 {
		t.Fatalf("sample %+v", got[1])
	}
	if got[2].Name != "vllm:prompt_tokens_total" || got[2].Value != 1000 || got[2].Label("missing") != "" {
		t.Fatalf("sample %+v", got[2])
	}
}
