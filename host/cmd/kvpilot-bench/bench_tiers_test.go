package main

import (
	"encoding/json"
	"runtime/debug"
	"testing"

	"github.com/kvpilot/kvpilot/host/config"
)

// bench tiers runs under the host's own GC target unless told otherwise,
// says which in its params, gives the process its own target back, and
// refuses one gc_percent would refuse.
func TestBenchTiersGCPercent(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	code, out, errs := runCLI("tiers", "--json", "--no-remote", "--pages", "2", "--iters", "1")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errs)
	}
	var r struct {
		Params map[string]any `json:"params"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := r.Params["gc_percent"]; got != float64(config.Default().GCPercent) {
		t.Fatalf("params.gc_percent %v, want the host's %d", got, config.Default().GCPercent)
	}
	if now := debug.SetGCPercent(150); now != 150 {
		t.Fatalf("GC target left at %d", now)
	}
	if code, _, _ := runCLI("tiers", "--gc-percent", "5"); code != 2 {
		t.Fatalf("--gc-percent 5: status %d, want 2 (usage)", code)
	}
}
