package main

import (
	"context"
	"flag"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// Flags that several scenarios take, each defined once.

// A trace-replaying scenario's flags name files and settings that are read
// once the flags are parsed: each such flag returns a load, and traceRun
// runs the loads before the scenario.

// tracesFlag defines a flag naming comma-separated trace files (by
// default names), loaded into dst.
func tracesFlag(fs *flag.FlagSet, flagName, usage string, dst *[]scenario.Trace, names ...string) func() error {
	v := fs.String(flagName, strings.Join(names, ","), usage)
	return func() (err error) {
		*dst, err = scenario.LoadTraces(strings.Split(*v, ",")...)
		return err
	}
}

// traceFlag defines --trace, one trace file (by default name), loaded into
// dst.
func traceFlag(fs *flag.FlagSet, usage, name string, dst *scenario.Trace) func() error {
	v := fs.String("trace", name, usage)
	return func() error {
		ts, err := scenario.LoadTraces(*v)
		if err == nil {
			*dst = ts[0]
		}
		return err
	}
}

// traceRun runs a trace-replaying scenario with p once loads have filled it.
func traceRun[P any, R scenario.Report](p *P, run func(context.Context, P, scenario.Progress) (R, error), loads ...func() error) runFunc {
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		for _, load := range loads {
			if err := load(); err != nil {
				return nil, err
			}
		}
		r, err := run(ctx, *p, prog)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
}

// pageSizeFlag defines --page-size, the host's and the engine's.
func pageSizeFlag(fs *flag.FlagSet, p *int) {
	fs.IntVar(p, "page-size", 16, "tokens per page")
}

// modelFlag defines --model, the reference engine's model layout.
func modelFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "model", "gqa", "reference model layout: gqa or mla")
}

// editedFlags defines the flags of the scenarios that replay sessions under
// the truncation policy's edits (verb: what it does to old tool results):
// their traces (by default traces), the policy's params, the requests per
// session and the page size.
func editedFlags(fs *flag.FlagSet, p *scenario.EditedSessions, verb string, requests int, traces ...string) []func() error {
	load := tracesFlag(fs, "trace", "comma-separated trace files", &p.Traces, traces...)
	olderThan := fs.Int("older-than", 2, verb+" tool results older than this many assistant turns")
	maxChars := fs.Int("max-chars", 200, "head/tail stub length in characters")
	fs.IntVar(&p.MaxRequests, "requests", requests, "requests per session (0: all)")
	pageSizeFlag(fs, &p.PageSize)
	return []func() error{load, func() error {
		p.Policy = map[string]any{"older_than": *olderThan, "max_chars": *maxChars}
		return nil
	}}
}
