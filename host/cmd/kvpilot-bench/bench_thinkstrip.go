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
		Name:    "think-strip",
		Summary: "reasoning history stripped of <think>: arms keep, strip-reprefill, strip-splice",
		Run:     runBenchThinkStrip,
	})
}

func runBenchThinkStrip(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench think-strip", "[--json] [--plot FILE.svg] [--trace FILE] [--requests N]",
		"Replays a reasoning session (the trace's thinking rendered as <think>…</think>)\n"+
			"on the reference engine. Arms: keep (history keeps its thinking), strip-reprefill\n"+
			"(history stripped, prefix cache only), strip-splice (the harness declares each\n"+
			"strip as a Splice with an empty replacement, so the answer after it stays cached).", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	trace := fs.String("trace", scenario.TraceOpus, "a trace with thinking")
	var p scenario.ThinkStripParams
	fs.IntVar(&p.MaxRequests, "requests", 80, "requests of the session to replay")
	fs.IntVar(&p.MaxMessageChars, "max-message-chars", 3000, "cut every message to this many characters (0: whole)")
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.StringVar(&p.Model, "model", "gqa", "reference model layout: gqa or mla")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ts, err := scenario.LoadTraces(*trace)
	if err != nil {
		return err
	}
	p.Trace = ts[0]
	prog := scenario.TerminalProgress(os.Stderr)
	rep, err := scenario.RunThinkStrip(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench think-strip: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench think-strip")
}
