package main

import (
	"context"
	"fmt"
	"io"
	"sort"
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

func init() {
	registerCommand(command{
		Name:    "bench",
		Summary: "run a benchmark scenario and print its table (or --json)",
		Run:     runBench,
	})
}

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
	return s.Run(ctx, args[1:], stdout)
}

func benchUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: kvpilot bench <scenario> [--json] [scenario flags]\n\n")
	fmt.Fprintf(w, "Each scenario measures a target from DESIGN.md §12 against a baseline\n")
	fmt.Fprintf(w, "measured in the same run.\n\nScenarios:\n")
	names := make([]string, 0, len(benchScenarios))
	for n := range benchScenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, benchScenarios[n].Summary)
	}
	fmt.Fprintf(w, "\nRun 'kvpilot bench <scenario> --help' for its flags.\n")
}
