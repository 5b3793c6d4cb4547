package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// truncationFlags defines the flags of `kvpilot bench truncation` (its row in
// scenarios.go) and returns what runs it.
func truncationFlags(fs *flag.FlagSet) runFunc {
	var p scenario.TruncationParams
	loads := editedFlags(fs, &p.EditedSessions, "truncate", 0, scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceSWESmith)
	modelFlag(fs, &p.Model)
	return traceRun(&p, scenario.RunTruncation, loads...)
}
