package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// thinkStripFlags defines the flags of `kvpilot bench think-strip` (its row in
// scenarios.go) and returns what runs it.
func thinkStripFlags(fs *flag.FlagSet) runFunc {
	var p scenario.ThinkStripParams
	trace := traceFlag(fs, "a trace with thinking", scenario.TraceOpus, &p.Trace)
	fs.IntVar(&p.MaxRequests, "requests", 80, "requests of the session to replay")
	fs.IntVar(&p.MaxMessageChars, "max-message-chars", 3000, "cut every message to this many characters (0: whole)")
	pageSizeFlag(fs, &p.PageSize)
	modelFlag(fs, &p.Model)
	return traceRun(&p, scenario.RunThinkStrip, trace)
}
