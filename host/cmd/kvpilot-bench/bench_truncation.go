package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func init() {
	registerBench(benchScenario{
		Name:    "truncation",
		Summary: "real agent traces under the truncation policy: prefill after edits, re-prefill vs splice",
		Run:     runBenchTruncation,
	})
}

func runBenchTruncation(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench truncation", "[--json] [--plot FILE.svg] [--trace FILE,...] [--older-than N] [--max-chars N]",
		"Replays real agent sessions under the built-in truncation policy (tool results\n"+
			"older than --older-than turns cut to a head/tail stub) on the reference engine. Arms: reprefill (the truncated\n"+
			"history meets a prefix cache) and splice (the policy's splices edit the cache\n"+
			"first; replacements are prefilled as fill orders and counted). Target: splice\n"+
			"saves >= 80% of the prefill reprefill spends after edits.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	traces := fs.String("trace", strings.Join([]string{scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceSWESmith}, ","), "comma-separated trace files")
	olderThan := fs.Int("older-than", 2, "truncate tool results older than this many assistant turns")
	maxChars := fs.Int("max-chars", 200, "head/tail stub length in characters")
	var p scenario.TruncationParams
	fs.IntVar(&p.MaxRequests, "requests", 0, "requests per session (0: all)")
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.StringVar(&p.Model, "model", "gqa", "reference model layout: gqa or mla")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ts, err := scenario.LoadTraces(strings.Split(*traces, ",")...)
	if err != nil {
		return err
	}
	p.Traces = ts
	p.Policy = map[string]any{"older_than": *olderThan, "max_chars": *maxChars}
	prog := scenario.TerminalProgress(os.Stderr)
	rep, err := scenario.RunTruncation(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench truncation: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench truncation")
}
