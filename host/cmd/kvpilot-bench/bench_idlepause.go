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
		Name:    "idle-pause",
		Summary: "idle sessions paused to disk by the idle-pause policy: device memory freed, resume cost vs re-prefill",
		Run:     runBenchIdlePause,
	})
}

func runBenchIdlePause(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench idle-pause", "[--json] [--plot FILE.svg] [--trace FILE,...] [--sessions N] [--idle N]",
		"Runs --sessions agent sessions (real traces behind one shared 4K-token system\n"+
			"block) for --turns turns; --idle of them go quiet past the idle-pause policy's\n"+
			"idle_after while the rest keep working; then the idle ones return. Arms: keep\n"+
			"(nothing paused), pause (the policy's leases on the disk tier, resumed on\n"+
			"return), drop (paused then revoked, so the return re-prefills).", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	traces := fs.String("trace", strings.Join([]string{scenario.TraceSWESmith, scenario.TraceSWEAgent, scenario.TraceDebugGym, scenario.TraceSubagent, scenario.TraceOpus}, ","), "comma-separated trace files")
	var p scenario.IdlePauseParams
	fs.IntVar(&p.Sessions, "sessions", 32, "sessions")
	fs.IntVar(&p.Idle, "idle", 24, "sessions that go idle")
	fs.IntVar(&p.Turns, "turns", 4, "turns each session runs before the idle period")
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.StringVar(&p.IdleAfter, "idle-after", "10m", "the policy's idle_after")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ts, err := scenario.LoadTraces(strings.Split(*traces, ",")...)
	if err != nil {
		return err
	}
	p.Traces = ts
	prog := scenario.TerminalProgress(os.Stderr)
	rep, err := scenario.RunIdlePause(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench idle-pause: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench idle-pause")
}
