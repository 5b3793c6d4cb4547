package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
)

// benchScenario is one row of the scenario table (scenarios.go): its line
// in the list, its help, and its own flags. What every scenario shares is
// written once, in run: --json, --plot where Plot is set, --check, the
// progress line on a terminal, and the report printed as a table, one
// JSON object or an SVG chart.
type benchScenario struct {
	Name    string
	Summary string
	// Synopsis lists the scenario's own flags for its usage line, which
	// starts with [--json] (and [--plot FILE.svg]).
	Synopsis string
	Help     string
	// Plot: the report draws charts, so the scenario takes --plot.
	Plot bool
	// Flags defines the scenario's own flags on fs and returns what runs
	// the scenario once they are parsed.
	Flags func(fs *flag.FlagSet) runFunc
}

// runFunc runs a scenario; prog reports progress to a person (nil when
// stderr is not a terminal). The report's JSON says whether its targets
// were met: every "met" and "pass" it holds, at any depth.
type runFunc func(ctx context.Context, prog scenario.Progress) (scenario.Report, error)

// runBench runs the scenario args[0] names with the rest of args; with no
// name (or list, or --help) it lists the scenarios on stdout.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "list" {
		benchUsage(stdout)
		return nil
	}
	i := scenarioIndex(args[0])
	if i < 0 {
		fmt.Fprintf(stderr, "kvpilot bench: unknown scenario %q\n\n", args[0])
		benchUsage(stderr)
		return cliflag.ErrUsage
	}
	s := scenarios[i]
	rest, check := withoutFlag(args[1:], "check")
	rep, err := s.run(ctx, rest, stdout, stderr)
	if err != nil || !check {
		return err
	}
	switch seen, met := targetsOf(rep); {
	case !seen:
		return fmt.Errorf("--check: scenario %s reports no targets to check", s.Name)
	case !met:
		return errTargetsMissed
	}
	return nil
}

func scenarioIndex(name string) int {
	for i, s := range scenarios {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// run parses the scenario's flags from args, runs it and prints its
// report on stdout.
func (s benchScenario) run(ctx context.Context, args []string, stdout, stderr io.Writer) (scenario.Report, error) {
	synopsis := "[--json] "
	if s.Plot {
		synopsis += "[--plot FILE.svg] "
	}
	fs := cliflag.New("kvpilot bench "+s.Name, synopsis+s.Synopsis, s.Help, stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := new(string)
	if s.Plot {
		plot = fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	}
	run := s.Flags(fs)
	if err := cliflag.Parse(fs, args, stdout); err != nil {
		return nil, err
	}
	term, _ := stderr.(*os.File)
	prog := scenario.TerminalProgress(term)
	rep, err := run(ctx, prog)
	scenario.EndProgress(term, prog)
	if err != nil {
		return nil, fmt.Errorf("bench %s: %w", s.Name, err)
	}
	return rep, output(stdout, rep, *asJSON, *plot, "kvpilot bench "+s.Name)
}

// output writes a report the way every `kvpilot bench` scenario does: its
// table, or one JSON object with --json; and the SVG plot when plotPath is
// set.
func output(stdout io.Writer, rep scenario.Report, asJSON bool, plotPath, title string) error {
	if plotPath != "" {
		f, err := os.Create(plotPath)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		werr := scenario.WriteSVG(f, title, rep.Charts())
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("plot %s: %w", plotPath, werr)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	if t, ok := rep.(interface{ WriteTable(io.Writer) error }); ok {
		return t.WriteTable(stdout)
	}
	return scenario.JSONTable(rep)(stdout)
}

// errTargetsMissed: --check was given and a target was missed (exit 1).
var errTargetsMissed = errors.New("targets missed")

// targetsOf reads a report's targets from its JSON: seen when it holds a
// "met" or a "pass", met when every one of them is true.
func targetsOf(rep scenario.Report) (seen, met bool) {
	b, err := json.Marshal(rep)
	var v any
	if err != nil || json.Unmarshal(b, &v) != nil {
		return false, false
	}
	met = true
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if b, ok := e.(bool); ok && (k == "met" || k == "pass") {
					seen, met = true, met && b
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
	return seen, met
}

// tableReport is the report of a harness that draws no chart: the JSON
// of v, and the table that table writes.
type tableReport struct {
	v     any
	table func(io.Writer) error
}

func (r tableReport) MarshalJSON() ([]byte, error) { return json.Marshal(r.v) }
func (r tableReport) WriteTable(w io.Writer) error { return r.table(w) }
func (tableReport) Charts() []scenario.Chart       { return nil }

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
	for _, s := range scenarios {
		fmt.Fprintf(w, "  %-14s %s\n", s.Name, s.Summary)
	}
	fmt.Fprintf(w, "\n--check makes the exit status say whether the scenario met its targets (1: missed).\n")
	fmt.Fprintf(w, "Run 'kvpilot bench <scenario> --help' for its flags.\n")
}
