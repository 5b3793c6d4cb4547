package main

import (
	"context"
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// thinkStripFlags defines the flags of `kvpilot bench think-strip` (its row in
// scenarios.go) and returns what runs it.
func thinkStripFlags(fs *flag.FlagSet) runFunc {
	trace := traceFlag(fs, "a trace with thinking", scenario.TraceOpus)
	var p scenario.ThinkStripParams
	fs.IntVar(&p.MaxRequests, "requests", 80, "requests of the session to replay")
	fs.IntVar(&p.MaxMessageChars, "max-message-chars", 3000, "cut every message to this many characters (0: whole)")
	pageSizeFlag(fs, &p.PageSize)
	modelFlag(fs, &p.Model)
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		var err error
		if p.Trace, err = trace(); err != nil {
			return nil, err
		}
		return scenario.RunThinkStrip(ctx, p, prog)
	}
}
