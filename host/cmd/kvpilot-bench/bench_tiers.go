package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/bench/tierbench"
)

func init() {
	registerBench(benchScenario{
		Name:    "tiers",
		Summary: "tier-pair throughput (device<->host, host<->disk, host<->remote) vs memcpy and plain file I/O",
		Run:     runBenchTiers,
	})
}

func runBenchTiers(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench tiers", "[--json] [--pages N] [--remote-pages N] [--iters N] [--dir DIR] [--no-remote]",
		"Moves pages between each pair of tiers through the real pools (memfd arenas,\n"+
			"the disk page file, the JetStream object store on an embedded server) and\n"+
			"reports GB/s against memcpy and a plain sequential file write/read of the\n"+
			"same bytes in the same run (target: ratio >= 0.7 for memory and disk).", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	pages := fs.Int("pages", 128, "pages per memory and disk arm (2 MiB each)")
	remotePages := fs.Int("remote-pages", 16, "pages per remote arm")
	iters := fs.Int("iters", 5, "measured rounds, arms interleaved (medians reported)")
	dir := fs.String("dir", "", "directory for page files and NATS data (default: a temp dir)")
	noRemote := fs.Bool("no-remote", false, "skip the remote arms")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, err := tierbench.Run(ctx, tierbench.Options{Pages: *pages, RemotePages: *remotePages, Iters: *iters, Dir: *dir, NoRemote: *noRemote})
	if err != nil {
		return fmt.Errorf("bench tiers: %w", err)
	}
	reportTargetsOf(ctx, r)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	r.Table(stdout)
	return nil
}
