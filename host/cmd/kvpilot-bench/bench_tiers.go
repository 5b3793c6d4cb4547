package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/kvpilot/kvpilot/host/bench/tierbench"
	"github.com/kvpilot/kvpilot/host/config"
)

func init() {
	registerBench(benchScenario{
		Name:    "tiers",
		Summary: "tier-pair throughput (device<->host, host<->disk, host<->remote) vs memcpy and plain file I/O",
		Run:     runBenchTiers,
	})
}

func runBenchTiers(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench tiers", "[--json] [--pages N] [--remote-pages N] [--iters N] [--dir DIR] [--redis ADDR|auto|off] [--s3 ADDR|auto|off] [--no-remote] [--gc-percent N]",
		"Moves pages between each pair of tiers through the real pools (memfd arenas,\n"+
			"the disk page file, and each remote backend: the JetStream object store on an\n"+
			"embedded server, and Redis) and reports GB/s against baselines of the same\n"+
			"bytes in the same run: memcpy, a plain sequential file write/read, and each\n"+
			"remote backend's raw put and get (JetStream objects, Redis SET and GET).\n"+
			"S3-compatible storage (SeaweedFS, started when weed is installed) is measured\n"+
			"raw beside them as a candidate shared tier.\n"+
			"Targets: memory and disk pairs >= 0.9 of their baseline; each remote backend\n"+
			">= 0.9 of its raw baseline; the fastest remote backend >= 2 GB/s both ways.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	pages := fs.Int("pages", 128, "pages per memory and disk arm (2 MiB each)")
	remotePages := fs.Int("remote-pages", 16, "pages per remote arm")
	iters := fs.Int("iters", 5, "measured rounds, arms interleaved (medians reported)")
	dir := fs.String("dir", "", "directory for page files and NATS data (default: a temp dir)")
	noRemote := fs.Bool("no-remote", false, "skip the remote arms")
	redisAddr := fs.String("redis", "auto", "a Redis or Valkey server for the redis arms; auto starts one when redis-server is installed; off skips them")
	s3Addr := fs.String("s3", "auto", "an S3-compatible endpoint (host:port) for the s3 candidate arms, measured raw; auto starts SeaweedFS when weed is installed; off skips them")
	gcPercent := fs.Int("gc-percent", config.Default().GCPercent, "the Go GC target (GOGC) for the run; the default is the host's own (gc_percent)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *gcPercent < 25 || *gcPercent > 10000 {
		fmt.Fprintf(os.Stderr, "kvpilot bench tiers: --gc-percent %d is not in 25..10000 (the range gc_percent takes)\n", *gcPercent)
		return errUsage
	}
	// Every arm of the run moves megabyte pages through freshly allocated
	// buffers (client libraries allocate each reply), so the collector's
	// pace shapes the figures. The host runs with its gc_percent, so the
	// bench does too, and says so in its params.
	defer debug.SetGCPercent(debug.SetGCPercent(*gcPercent))
	r, err := tierbench.Run(ctx, tierbench.Options{Pages: *pages, RemotePages: *remotePages, Iters: *iters, Dir: *dir, NoRemote: *noRemote, Redis: *redisAddr, S3: *s3Addr})
	if err != nil {
		return fmt.Errorf("bench tiers: %w", err)
	}
	r.Params["gc_percent"] = *gcPercent
	reportTargetsOf(ctx, r)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	r.Table(stdout)
	return nil
}
