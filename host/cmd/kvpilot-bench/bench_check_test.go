package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

type fakeReport struct {
	Targets struct {
		Met bool `json:"met"`
	} `json:"targets"`
}

func (fakeReport) WriteTable(w io.Writer) error { _, err := fmt.Fprintln(w, "fake table"); return err }
func (fakeReport) Charts() []scenario.Chart     { return nil }

// The fake scenarios join the table as any scenario does: a row whose
// run returns a report.
func init() {
	for name, met := range map[string]bool{"fake-met": true, "fake-missed": false} {
		var r fakeReport
		r.Targets.Met = met
		scenarios = append(scenarios, fakeScenario(name, r))
	}
	scenarios = append(scenarios, fakeScenario("fake-untargeted", untargetedReport{}))
}

func fakeScenario(name string, r scenario.Report) benchScenario {
	return benchScenario{Name: name, Summary: "a test scenario", Help: "A test scenario.", Flags: func(*flag.FlagSet) runFunc {
		return func(context.Context, scenario.Progress) (scenario.Report, error) { return r, nil }
	}}
}

type untargetedReport struct{ fakeReport }

func (untargetedReport) MarshalJSON() ([]byte, error) { return []byte(`{"arms":{}}`), nil }

// `bench <scenario> --check` tells in its exit status whether the targets
// were met; without --check a missed target still exits 0 (the report says
// it), and a scenario with no targets cannot be checked.
func TestBenchCheckExitStatus(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"fake-met", "--check"}, 0, "fake table"},
		{[]string{"fake-missed", "--check"}, 1, "targets missed"},
		{[]string{"fake-missed"}, 0, "fake table"},
		{[]string{"fake-untargeted", "--check"}, 1, "no targets"},
	} {
		code, out, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(out+errs, c.out) {
			t.Errorf("%v: status %d, output %q %q; want %d and %q", c.args, code, out, errs, c.code, c.out)
		}
	}
}

// bench rotate reports its target (a ratio to memcpy of the same bytes),
// so --check tells; whether this busy machine meets it is not asserted.
func TestBenchRotateHasTargets(t *testing.T) {
	code, out, errs := runCLI("rotate", "--slots", "64", "--layers", "1", "--iters", "1", "--check")
	if (code != 0 && code != 1) || strings.Contains(errs, "no targets") || !strings.Contains(out, "targets:  ratio_min=0.5  met=") {
		t.Fatalf("bench rotate --check: status %d, stdout %q, stderr %q", code, out, errs)
	}
	if met := strings.Contains(out, "met=true"); met != (code == 0) {
		t.Fatalf("bench rotate --check: status %d for %q", code, out)
	}
}

// bench index reports its targets, memory per page included, so --check
// tells.
func TestBenchIndexHasTargets(t *testing.T) {
	if invariantsOn {
		t.Skip("the index benchmark's workloads take minutes with the invariant checker on every step; run it without: go test -run TestBenchIndexHasTargets ./host/cmd/kvpilot-bench")
	}
	code, out, errs := runCLI("index", "--pages", "8", "--iters", "2", "--memory-pages", "4096", "--json", "--check")
	if (code != 0 && code != 1) || strings.Contains(errs, "no targets") || !strings.Contains(out, `"bytes_per_page"`) {
		t.Fatalf("bench index --check: status %d, stdout %q, stderr %q", code, out, errs)
	}
	if met := strings.Contains(out, `"met":true`); met != (code == 0) {
		t.Fatalf("bench index --check: status %d for %q", code, out)
	}
}
