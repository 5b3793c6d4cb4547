package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// realModelFlags defines the flags of `kvpilot bench real-model` (its row in
// scenarios.go) and returns what runs it.
func realModelFlags(fs *flag.FlagSet) runFunc {
	var o scenario.RealModelOptions
	fs.IntVar(&o.Tokens, "tokens", 4096, "approximate prompt length")
	fs.StringVar(&o.Model, "model", "", "the model: smollm2 (the default), or llama, qwen2, linear, mla (random weights)")
	pageSizeFlag(fs, &o.PageSize)
	fs.StringVar(&o.Python, "python", "", "interpreter with the kvpilot package (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the host's and the Python side's logs")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		// The traces directory: any trace file resolves it (FindTrace).
		p, err := scenario.FindTrace(scenario.TraceDebugGym)
		if err != nil {
			return nil, err
		}
		o.Traces = filepath.Dir(p)
		if *verbose {
			o.Stderr = os.Stderr
		}
		return scenario.RunRealModel(ctx, o)
	}
}
