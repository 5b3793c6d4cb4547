package main

import (
	"context"
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// gatewayFlags defines the flags of `kvpilot bench gateway` (its row in
// scenarios.go) and returns what runs it.
func gatewayFlags(fs *flag.FlagSet) runFunc {
	traces := tracesFlag(fs, "trace", "comma-separated trace files", scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceOpus)
	policy := truncationPolicyFlags(fs, "clear")
	var p scenario.GatewayParams
	fs.IntVar(&p.MaxRequests, "requests", 30, "requests per session (0: all)")
	pageSizeFlag(fs, &p.PageSize)
	fs.Float64Var(&p.TimeScale, "time-scale", 1, "the engine waits its modelled TTFT times this before answering")
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		var err error
		if p.Traces, err = traces(); err != nil {
			return nil, err
		}
		p.Policy = policy()
		return scenario.RunGateway(ctx, p, prog)
	}
}
