package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func init() {
	registerBench(benchScenario{
		Name:    "real-model",
		Summary: "a real transformer on this CPU: full prefill, prefix from kvpilot, re-prefill after an edit, splice",
		Run:     runBenchRealModel,
	})
}

func runBenchRealModel(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench real-model", "[--json] [--plot FILE.svg] [--tokens N] [--model NAME] [--python PATH]",
		"Starts a host and runs kvbench.realmodel (host/bench/python) against it: a tiny\n"+
			"transformers model with seeded random weights, on a prompt of about --tokens\n"+
			"tokens built from the agent traces. Arms, wall clock in one run: full prefill;\n"+
			"the prefix from kvpilot in a fresh engine; re-prefill after an early tool output\n"+
			"is truncated; the same edit as a kvpilot splice. Targets: prefix\n"+
			"TTFT <= 0.25x full prefill with logits within 1e-5; splice prefills <= 20% of\n"+
			"the re-prefill; layer-0 keys exact after the splice.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	var o scenario.RealModelOptions
	fs.IntVar(&o.Tokens, "tokens", 4096, "approximate prompt length")
	fs.StringVar(&o.Model, "model", "", "the tiny model (the Python side's default when empty)")
	fs.IntVar(&o.PageSize, "page-size", 16, "tokens per page")
	fs.StringVar(&o.Python, "python", "", "interpreter with the kvpilot package (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the host's and the Python side's logs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// The traces directory: any trace file resolves it (FindTrace).
	p, err := scenario.FindTrace(scenario.TraceDebugGym)
	if err != nil {
		return err
	}
	o.Traces = filepath.Dir(p)
	if *verbose {
		o.Stderr = os.Stderr
	}
	rep, err := scenario.RunRealModel(ctx, o)
	if err != nil {
		return fmt.Errorf("bench real-model: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench real-model")
}
