package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// spliceReplayFlags defines the flags of `kvpilot bench splice-replay` (its row in
// scenarios.go) and returns what runs it.
func spliceReplayFlags(fs *flag.FlagSet) runFunc {
	var p scenario.SpliceReplayParams
	answers := traceFlag(fs, "trace whose messages supply the answers", scenario.TraceDebugGym, &p.Answers)
	fs.IntVar(&p.Turns, "turns", 6, "user turns")
	fs.IntVar(&p.EditTurn, "edit-turn", 0, "the edited turn (from 0)")
	fs.IntVar(&p.AnswerChars, "answer-chars", 8000, "characters per answer")
	pageSizeFlag(fs, &p.PageSize)
	modelFlag(fs, &p.Model)
	return traceRun(&p, scenario.RunSpliceReplay, answers)
}
