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
		Name:    "gateway",
		Summary: "real sessions resent in full through the front door: prefix cache, edits + re-prefill, edits + splice",
		Run:     runBenchGateway,
	})
}

func runBenchGateway(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench gateway", "[--json] [--plot FILE.svg] [--trace FILE,...] [--requests N] [--time-scale X]",
		"Resends real agent sessions in full, as a harness does, through kvpilot's front\n"+
			"door (OpenAI chat completions, streaming) to the reference engine's HTTP\n"+
			"server, on a fresh host per arm. Arms: prefix-cache (no edits), edits-reprefill\n"+
			"(the truncation policy's edits applied to the messages; the cache re-prefills\n"+
			"after each, as Anthropic's server does) and edits-splice (the same edits,\n"+
			"spliced by the host's session diff). Reports prefill tokens and the TTFT\n"+
			"measured through HTTP. Target: splice saves >= 80% of what\n"+
			"re-prefill spends after edits.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	traces := fs.String("trace", strings.Join([]string{scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceOpus}, ","), "comma-separated trace files")
	olderThan := fs.Int("older-than", 2, "clear tool results older than this many assistant turns")
	maxChars := fs.Int("max-chars", 200, "head/tail stub length in characters")
	var p scenario.GatewayParams
	fs.IntVar(&p.MaxRequests, "requests", 30, "requests per session (0: all)")
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.Float64Var(&p.TimeScale, "time-scale", 1, "the engine waits its modelled TTFT times this before answering")
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
	rep, err := scenario.RunGateway(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench gateway: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench gateway")
}
