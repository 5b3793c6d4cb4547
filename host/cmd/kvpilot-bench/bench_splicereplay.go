package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func init() {
	registerBench(benchScenario{
		Name:    "splice-replay",
		Summary: "build a conversation, edit an early turn's topic word, replay it: cache-off, radix, splice",
		Run:     runBenchSpliceReplay,
	})
}

func runBenchSpliceReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench splice-replay", "[--json] [--plot FILE.svg] [--trace FILE] [--turns N] [--edit-turn N] [--model gqa|mla]",
		"A three-phase message-edit benchmark on the reference engine:\n"+
			"build a session of --turns template user turns (answers from a real trace)\n"+
			"behind a 4K-token system block, re-issue it up to --edit-turn with the topic\n"+
			"word swapped, then replay the edited conversation. Arms: cache-off, radix\n"+
			"(prefix cache), splice (index.auto_splice: session diff splices the edit).\n"+
			"The reference engine checks the splice contract on every cached key.\n"+
			"Target: splice >= 95% replay hit, radix lower.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	trace := fs.String("trace", scenario.TraceDebugGym, "trace whose messages supply the answers")
	var p scenario.SpliceReplayParams
	fs.IntVar(&p.Turns, "turns", 6, "user turns")
	fs.IntVar(&p.EditTurn, "edit-turn", 0, "the edited turn (from 0)")
	fs.IntVar(&p.AnswerChars, "answer-chars", 8000, "characters per answer")
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.StringVar(&p.Model, "model", "gqa", "reference model layout: gqa or mla")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ts, err := scenario.LoadTraces(*trace)
	if err != nil {
		return err
	}
	p.Answers = ts[0]
	prog := scenario.TerminalProgress(os.Stderr)
	rep, err := scenario.RunSpliceReplay(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench splice-replay: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench splice-replay")
}
