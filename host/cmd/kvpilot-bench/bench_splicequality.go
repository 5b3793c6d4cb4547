package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// caseFlags collects repeated --case flags.
type caseFlags []string

func (c *caseFlags) String() string     { return strings.Join(*c, ",") }
func (c *caseFlags) Set(v string) error { *c = append(*c, v); return nil }

// spliceQualityFlags defines the flags of `kvpilot bench splice-quality` (its
// row in scenarios.go) and returns what runs it.
func spliceQualityFlags(fs *flag.FlagSet) runFunc {
	var o scenario.SpliceQualityOptions
	var cases caseFlags
	fs.IntVar(&o.Cases, "cases", 0, "run the first N cases (0: all)")
	fs.Var(&cases, "case", "run this case (repeatable; the names are in the JSON's cases)")
	fs.IntVar(&o.ContextTokens, "context-tokens", 0, "longest context in tokens (the Python side's default when 0)")
	fs.Float64Var(&o.MaxKL, "max-kl", 0, "the guard's budget, mean KL per token (the default budget when 0)")
	fs.StringVar(&o.Python, "python", "", "interpreter with the kvpilot package (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the host's and the Python side's logs")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		o.Case = cases
		// The traces: the Python side reads $KVPILOT_TRACES, else the
		// repository's examples/traces (kvbench.traces.find_traces_dir).
		if *verbose {
			o.Stderr = os.Stderr
		}
		return scenario.RunSpliceQuality(ctx, o)
	}
}
