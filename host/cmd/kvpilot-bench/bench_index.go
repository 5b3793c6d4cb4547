package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kvpilot/kvpilot/host/bench/cachebench"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// indexBytesPerPageMax is the target for the index's memory per cached page
// at a million pages.
const indexBytesPerPageMax = 256

// indexFlags defines the flags of `kvpilot bench index` (its row in
// scenarios.go) and returns what runs it.
func indexFlags(fs *flag.FlagSet) runFunc {
	pages := fs.Int("pages", 512, "pages per prompt")
	pageSize := fs.Int("page-size", 64, "tokens per page")
	iters := fs.Int("iters", 2000, "timed repetitions of each match+commit arm")
	memPages := fs.Int("memory-pages", 1_000_000, "cached pages for the memory measurement")
	return func(context.Context, scenario.Progress) (scenario.Report, error) {
		r, err := cachebench.Run(*pages, *pageSize, *iters)
		if err != nil {
			return nil, err
		}
		mem, err := cachebench.MeasureMemory(*memPages)
		if err != nil {
			return nil, err
		}
		met := r.MatchCommitMicros <= 50 && r.BlockOpsPerSec >= 2e6 && mem.BytesPerPage <= indexBytesPerPageMax
		return tableReport{indexJSON(r, mem, met), func(w io.Writer) error { return indexTable(w, r, mem, met) }}, nil
	}
}

func indexJSON(r cachebench.Result, mem cachebench.Memory, met bool) map[string]any {
	return map[string]any{
		"scenario": "index",
		"params":   map[string]int{"pages": r.Pages, "page_size": r.PageSize, "tokens": r.Pages * r.PageSize, "iters": r.Iters},
		"arms": map[string]any{
			"index": map[string]float64{
				"match_commit_us":      r.MatchCommitMicros,
				"match_commit_cold_us": r.MatchCommitColdMicros,
				"block_ops_per_sec":    r.BlockOpsPerSec,
			},
			"memory": mem,
			"baseline": map[string]float64{
				"hash_only_us":    r.HashMicros,
				"map_ops_per_sec": r.MapOpsPerSec,
			},
		},
		"targets": map[string]any{
			"match_commit_us_max":   50,
			"block_ops_per_sec_min": 2_000_000,
			"bytes_per_page_max":    indexBytesPerPageMax,
			"met":                   met,
		},
	}
}

func indexTable(w io.Writer, r cachebench.Result, mem cachebench.Memory, met bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "index bench: %d pages x %d tokens (%d tokens), %d iters\n\n", r.Pages, r.PageSize, r.Pages*r.PageSize, r.Iters)
	fmt.Fprintf(tw, "measure\tindex\tbaseline\ttarget\n")
	fmt.Fprintf(tw, "match+commit, cached prompt (us)\t%.1f\t%.1f (hash only)\t<= 50\n", r.MatchCommitMicros, r.HashMicros)
	fmt.Fprintf(tw, "match+commit, new prompt (us)\t%.1f\t%.1f (hash only)\t-\n", r.MatchCommitColdMicros, r.HashMicros)
	fmt.Fprintf(tw, "block ops/s (one core)\t%.2fM\t%.2fM (map lookup)\t>= 2M\n", r.BlockOpsPerSec/1e6, r.MapOpsPerSec/1e6)
	fmt.Fprintf(tw, "heap per cached page (%d pages, bytes)\t%.0f\t-\t<= %d\n", mem.Pages, mem.BytesPerPage, indexBytesPerPageMax)
	fmt.Fprintf(tw, "\ntargets met: %v\n", met)
	return tw.Flush()
}
