package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestFormats(t *testing.T) {
	var buf bytes.Buffer
	New(&buf, "info", "auto").Info("hello", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("auto on a non-terminal must log JSON, got %q: %v", buf.String(), err)
	}
	if rec["@message"] != "hello" || rec["k"] != float64(1) {
		t.Fatalf("record %v", rec)
	}
	buf.Reset()
	New(&buf, "info", "text").Debug("hidden")
	New(&buf, "info", "text").Warn("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), "shown") {
		t.Fatalf("level filter: %q", buf.String())
	}
}
