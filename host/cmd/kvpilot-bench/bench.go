package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// benchScenario is one `kvpilot bench <name>` scenario. Run receives the
// arguments after the scenario name and parses its own flags (every scenario
// accepts --json); it writes a table for people, or JSON for machines, to
// stdout.
type benchScenario struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout io.Writer) error
}

var benchScenarios = map[string]benchScenario{}

// registerBench adds a scenario; each lives in its own bench_<name>.go file.
func registerBench(s benchScenario) {
	if _, dup := benchScenarios[s.Name]; dup {
		panic("kvpilot: bench scenario registered twice: " + s.Name)
	}
	benchScenarios[s.Name] = s
}

// runBench runs the scenario args[0] names with the rest of args; with no
// name (or list, or --help) it lists the scenarios on stdout.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "list" {
		benchUsage(stdout)
		return nil
	}
	s, ok := benchScenarios[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvpilot bench: unknown scenario %q\n\n", args[0])
		benchUsage(stderr)
		return errUsage
	}
	rest, check := withoutFlag(args[1:], "check")
	if !check {
		return s.Run(ctx, rest, stdout)
	}
	tc := &targetCheck{}
	if err := s.Run(context.WithValue(ctx, targetCheckKey{}, tc), rest, stdout); err != nil {
		return err
	}
	switch {
	case !tc.seen:
		return fmt.Errorf("--check: scenario %s reports no targets to check", s.Name)
	case !tc.met:
		return errTargetsMissed
	}
	return nil
}

// errTargetsMissed: --check was given and a target was missed (exit 1).
var errTargetsMissed = errors.New("targets missed")

// targetCheck collects what a scenario reported of its targets when
// `bench <scenario> --check` asks for an exit status that tells.
type targetCheck struct{ seen, met bool }

type targetCheckKey struct{}

// reportMet records whether a scenario met its targets (a no-op without
// --check).
func reportMet(ctx context.Context, met bool) {
	if tc, ok := ctx.Value(targetCheckKey{}).(*targetCheck); ok {
		tc.met = met && (tc.met || !tc.seen)
		tc.seen = true
	}
}

// reportTargetsOf records the targets of a report from its JSON: every
// "met" and "pass" it holds, at any depth, must be true.
func reportTargetsOf(ctx context.Context, report any) {
	if _, ok := ctx.Value(targetCheckKey{}).(*targetCheck); !ok {
		return
	}
	b, err := json.Marshal(report)
	if err != nil {
		return
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if b, ok := e.(bool); ok && (k == "met" || k == "pass") {
					reportMet(ctx, b)
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
}

// benchOutput prints a scenario's report (scenario.Output) and records its
// targets for --check.
func benchOutput(ctx context.Context, stdout io.Writer, rep scenario.Report, asJSON bool, plot, title string) error {
	reportTargetsOf(ctx, rep)
	return scenario.Output(stdout, rep, asJSON, plot, title)
}

// withoutFlag removes a boolean flag (-name, --name, --name=true|false)
// from args and reports whether it was set.
func withoutFlag(args []string, name string) ([]string, bool) {
	var out []string
	set := false
	for i, a := range args {
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		switch a {
		case "-" + name, "--" + name, "-" + name + "=true", "--" + name + "=true":
			set = true
		case "-" + name + "=false", "--" + name + "=false":
			set = false
		default:
			out = append(out, a)
		}
	}
	return out, set
}

func benchUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: kvpilot bench <scenario> [--json] [--check] [scenario flags]\n\n")
	fmt.Fprintf(w, "Each scenario measures kvpilot against a baseline measured in the same\n")
	fmt.Fprintf(w, "run, and says whether it met its targets.\n\nScenarios:\n")
	names := make([]string, 0, len(benchScenarios))
	for n := range benchScenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, benchScenarios[n].Summary)
	}
	fmt.Fprintf(w, "\n--check makes the exit status say whether the scenario met its targets (1: missed).\n")
	fmt.Fprintf(w, "Run 'kvpilot bench <scenario> --help' for its flags.\n")
}
