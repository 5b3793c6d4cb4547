package main

import (
	"context"
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// spliceReplayFlags defines the flags of `kvpilot bench splice-replay` (its row in
// scenarios.go) and returns what runs it.
func spliceReplayFlags(fs *flag.FlagSet) runFunc {
	trace := traceFlag(fs, "trace whose messages supply the answers", scenario.TraceDebugGym)
	var p scenario.SpliceReplayParams
	fs.IntVar(&p.Turns, "turns", 6, "user turns")
	fs.IntVar(&p.EditTurn, "edit-turn", 0, "the edited turn (from 0)")
	fs.IntVar(&p.AnswerChars, "answer-chars", 8000, "characters per answer")
	pageSizeFlag(fs, &p.PageSize)
	modelFlag(fs, &p.Model)
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		var err error
		if p.Answers, err = trace(); err != nil {
			return nil, err
		}
		return scenario.RunSpliceReplay(ctx, p, prog)
	}
}
