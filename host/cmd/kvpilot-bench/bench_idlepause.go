package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// idlePauseFlags defines the flags of `kvpilot bench idle-pause` (its row in
// scenarios.go) and returns what runs it.
func idlePauseFlags(fs *flag.FlagSet) runFunc {
	var p scenario.IdlePauseParams
	traces := tracesFlag(fs, "trace", "comma-separated trace files", &p.Traces,
		scenario.TraceSWESmith, scenario.TraceSWEAgent, scenario.TraceDebugGym, scenario.TraceSubagent, scenario.TraceOpus)
	fs.IntVar(&p.Sessions, "sessions", 32, "sessions")
	fs.IntVar(&p.Idle, "idle", 24, "sessions that go idle")
	fs.IntVar(&p.Turns, "turns", 4, "turns each session runs before the idle period")
	pageSizeFlag(fs, &p.PageSize)
	fs.StringVar(&p.IdleAfter, "idle-after", "10m", "the policy's idle_after")
	return traceRun(&p, scenario.RunIdlePause, traces)
}
