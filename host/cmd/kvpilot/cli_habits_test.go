package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// The command follows its ecosystem's habits: asked-for help goes to stdout
// with status 0, there is a version command, bench lists its scenarios,
// and flags may follow the positional arguments.
func TestCLIHabits(t *testing.T) {
	benchOnPath(t) // bench is kvpilot-bench's, run through kvpilot
	for _, args := range [][]string{{"--help"}, {"hash", "--help"}, {"ctl", "--help"}, {"ctl", "cache", "--help"}, {"bench"}, {"bench", "rotate", "--help"}} {
		code, out, errs := runCLI(args...)
		if code != 0 || !strings.Contains(out, "Usage") || errs != "" {
			t.Errorf("%v: status %d, stdout %.60q, stderr %.60q", args, code, out, errs)
		}
	}
	if code, _, errs := runCLI("hash", "--no-such-flag", "1"); code != 2 || !strings.Contains(errs, "no-such-flag") {
		t.Errorf("unknown flag: status %d, stderr %q", code, errs)
	}
	code, out, _ := runCLI("version")
	if code != 0 || !strings.Contains(out, "kvpilot ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	_, before, _ := runCLI("hash", "--block-size", "32", "0..64")
	code, after, errs := runCLI("hash", "0..64", "--block-size", "32")
	var h struct{ Local []uint64 }
	if code != 0 || before != after || json.Unmarshal([]byte(after), &h) != nil || len(h.Local) != 2 {
		t.Errorf("flags after the arguments: %d %q %q (want %q)", code, after, errs, before)
	}
}

// ctl's own flags work after the verb, and a negative (signed) hash is an
// argument, not a flag.
func TestCtlFlagsAfterTheVerb(t *testing.T) {
	h, err := controlhost.Start(filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	code, out, errs := runCLI("ctl", "stats", "--socket", h.Socket, "--json")
	if code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("ctl stats --socket S --json: %d %q %q", code, out, errs)
	}
	code, out, _ = runCLI("ctl", "cache", "-9143094415614847814", "--socket", h.Socket, "--ttl", "5m")
	if code != 1 || !strings.Contains(out, "unknown_block") {
		t.Fatalf("ctl cache with a signed hash: %d %q", code, out)
	}
}
