package scenario

import (
	"bytes"
	"strings"
	"testing"
)

// A Go report's table is its JSON's: rows whose fields are objects get a
// table of each such field (the gateway's TTFT quantiles, truncation's
// all/after_edit), a list of scalars stays on its line, and an object
// whose members share no field is sections, not rows.
func TestJSONTable(t *testing.T) {
	v := map[string]any{
		"arms": map[string]any{
			"a": map[string]any{"requests": 2, "ttft_ms": map[string]float64{"p50": 1.5}},
			"b": map[string]any{"requests": 3, "ttft_ms": map[string]float64{"p50": 2.25}},
		},
		"model":    map[string]any{"params": map[string]int{"tokens": 8}, "arms": map[string]any{"x": map[string]int{"ms": 4}}},
		"sessions": []string{"s1", "s2"},
	}
	var b bytes.Buffer
	if err := JSONTable(v)(&b); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(b.String(), "\n") {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	table := strings.Join(got, "\n")
	for _, want := range []string{"arms requests\na 2\nb 3\n", "arms.ttft_ms p50\na 1.5\nb 2.25\n",
		"model.params: tokens=8\n", "model.arms ms\nx 4\n", "sessions: [s1 s2]"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
