package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// gatewayFlags defines the flags of `kvpilot bench gateway` (its row in
// scenarios.go) and returns what runs it.
func gatewayFlags(fs *flag.FlagSet) runFunc {
	var p scenario.GatewayParams
	loads := editedFlags(fs, &p.EditedSessions, "clear", 30, scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceOpus)
	fs.Float64Var(&p.TimeScale, "time-scale", 1, "the engine waits its modelled TTFT times this before answering")
	return traceRun(&p, scenario.RunGateway, loads...)
}
