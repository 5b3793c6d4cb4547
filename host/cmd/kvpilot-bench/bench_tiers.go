package main

import (
	"context"
	"flag"
	"runtime"
	"runtime/debug"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/bench/tierbench"
	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
	"github.com/kvpilot/kvpilot/host/config"
)

// tiersFlags defines the flags of `kvpilot bench tiers` (its row in
// scenarios.go) and returns what runs it.
func tiersFlags(fs *flag.FlagSet) runFunc {
	var o tierbench.Options
	fs.IntVar(&o.Pages, "pages", 128, "pages per memory and disk arm (2 MiB each)")
	fs.IntVar(&o.RemotePages, "remote-pages", 16, "pages per remote arm")
	fs.IntVar(&o.Iters, "iters", 5, "measured rounds, arms interleaved (medians reported)")
	fs.StringVar(&o.Dir, "dir", "", "directory for page files and NATS data (default: a temp dir)")
	fs.BoolVar(&o.NoRemote, "no-remote", false, "skip the remote arms")
	fs.IntVar(&o.Cores, "cores", runtime.NumCPU(), "cores the memory arms also run on, sharing the pages (1: one core only)")
	fs.StringVar(&o.Redis, "redis", "auto", "a Redis or Valkey server for the redis arms; auto starts one when redis-server is installed; off skips them")
	fs.StringVar(&o.S3, "s3", "auto", "an S3-compatible endpoint (host:port) for the s3 candidate arms, measured raw; auto starts SeaweedFS when weed is installed; off skips them")
	gcPercent := fs.Int("gc-percent", config.Default().GCPercent, "the Go GC target (GOGC) for the run; the default is the host's own (gc_percent)")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		if *gcPercent < 25 || *gcPercent > 10000 {
			return nil, cliflag.Usagef("--gc-percent %d is not in 25..10000 (the range gc_percent takes)", *gcPercent)
		}
		// Every arm of the run moves megabyte pages through freshly
		// allocated buffers (client libraries allocate each reply), so the
		// collector's pace shapes the figures. The host runs with its
		// gc_percent, so the bench does too, and says so in its params.
		defer debug.SetGCPercent(debug.SetGCPercent(*gcPercent))
		r, err := tierbench.Run(ctx, o)
		if err != nil {
			return nil, err
		}
		r.Params["gc_percent"] = *gcPercent
		return tableReport{r, scenario.JSONTable(r)}, nil
	}
}
