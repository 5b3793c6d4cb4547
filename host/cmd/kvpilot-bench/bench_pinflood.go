package main

import (
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// pinFloodFlags defines the flags of `kvpilot bench pin-flood` (its row in
// scenarios.go) and returns what runs it.
func pinFloodFlags(fs *flag.FlagSet) runFunc {
	var p scenario.PinFloodParams
	vip := traceFlag(fs, "the VIP session's trace file", scenario.TraceDebugGym, &p.VIP)
	flood := tracesFlag(fs, "flood-trace", "comma-separated flood trace files", &p.Flood,
		scenario.TraceSWESmith, scenario.TraceSWEAgent, scenario.TraceSubagent, scenario.TraceOpus)
	pageSizeFlag(fs, &p.PageSize)
	fs.IntVar(&p.DevicePages, "device-pages", 2048, "device tier capacity in pages")
	fs.IntVar(&p.HostPages, "host-pages", 4096, "host tier capacity in pages")
	fs.IntVar(&p.WarmupTurns, "warmup", 10, "VIP warm-up turns")
	fs.Float64Var(&p.FloodFactor, "flood-factor", 5, "flood unique tokens as a multiple of device+host capacity")
	fs.IntVar(&p.Concurrency, "concurrency", 128, "flood clients")
	fs.StringVar(&p.TTL, "ttl", "5m", "the pinned arm's cache_control ttl")
	fs.Float64Var(&p.DeviceHigh, "device-high", 0, "device tier high watermark (0: the host default)")
	fs.Float64Var(&p.DeviceLow, "device-low", 0, "device tier low watermark (0: the host default)")
	return traceRun(&p, scenario.RunPinFlood, vip, flood)
}
