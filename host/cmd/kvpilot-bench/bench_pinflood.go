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
		Name:    "pin-flood",
		Summary: "a pinned VIP session survives a 5x eviction flood; baseline vs cache_control ttl",
		Run:     runBenchPinFlood,
	})
}

func runBenchPinFlood(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench pin-flood", "[--json] [--plot FILE.svg] [--trace FILE] [--flood-trace FILE,...] [sizes]",
		"Warms a VIP session (a real trace behind a fixed 4K-token system block) for\n"+
			"--warmup turns, with cache_control ttl in the pinned arm; floods the host with\n"+
			"unrelated multi-turn sessions whose unique tokens are --flood-factor times the\n"+
			"device+host capacity, from --concurrency clients; then measures the VIP's next\n"+
			"turn on the reference engine. Targets: pinned hit >= 99% of the\n"+
			"pinned full pages, baseline ~0, modelled TTFT speedup >= 5x.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	vip := fs.String("trace", scenario.TraceDebugGym, "the VIP session's trace file")
	flood := fs.String("flood-trace", strings.Join([]string{scenario.TraceSWESmith, scenario.TraceSWEAgent, scenario.TraceSubagent, scenario.TraceOpus}, ","), "comma-separated flood trace files")
	var p scenario.PinFloodParams
	fs.IntVar(&p.PageSize, "page-size", 16, "tokens per page")
	fs.IntVar(&p.DevicePages, "device-pages", 2048, "device tier capacity in pages")
	fs.IntVar(&p.HostPages, "host-pages", 4096, "host tier capacity in pages")
	fs.IntVar(&p.WarmupTurns, "warmup", 10, "VIP warm-up turns")
	fs.Float64Var(&p.FloodFactor, "flood-factor", 5, "flood unique tokens as a multiple of device+host capacity")
	fs.IntVar(&p.Concurrency, "concurrency", 128, "flood clients")
	fs.StringVar(&p.TTL, "ttl", "5m", "the pinned arm's cache_control ttl")
	fs.Float64Var(&p.DeviceHigh, "device-high", 0, "device tier high watermark (0: the host default)")
	fs.Float64Var(&p.DeviceLow, "device-low", 0, "device tier low watermark (0: the host default)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	vt, err := scenario.LoadTraces(*vip)
	if err != nil {
		return err
	}
	ft, err := scenario.LoadTraces(strings.Split(*flood, ",")...)
	if err != nil {
		return err
	}
	p.VIP, p.Flood = vt[0], ft
	prog := scenario.TerminalProgress(os.Stderr)
	rep, err := scenario.RunPinFlood(ctx, p, prog)
	scenario.EndProgress(os.Stderr, prog)
	if err != nil {
		return fmt.Errorf("bench pin-flood: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench pin-flood")
}
