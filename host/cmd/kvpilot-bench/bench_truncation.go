package main

import (
	"context"
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// truncationFlags defines the flags of `kvpilot bench truncation` (its row in
// scenarios.go) and returns what runs it.
func truncationFlags(fs *flag.FlagSet) runFunc {
	traces := tracesFlag(fs, "trace", "comma-separated trace files", scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceSWESmith)
	policy := truncationPolicyFlags(fs, "truncate")
	var p scenario.TruncationParams
	fs.IntVar(&p.MaxRequests, "requests", 0, "requests per session (0: all)")
	pageSizeFlag(fs, &p.PageSize)
	modelFlag(fs, &p.Model)
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		var err error
		if p.Traces, err = traces(); err != nil {
			return nil, err
		}
		p.Policy = policy()
		return scenario.RunTruncation(ctx, p, prog)
	}
}
