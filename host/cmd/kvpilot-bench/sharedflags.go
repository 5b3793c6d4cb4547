package main

import (
	"flag"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// Flags that several scenarios take, each defined once.

// tracesFlag defines a flag naming comma-separated trace files (by
// default names) and returns what loads them once the flags are parsed.
func tracesFlag(fs *flag.FlagSet, flagName, usage string, names ...string) func() ([]scenario.Trace, error) {
	v := fs.String(flagName, strings.Join(names, ","), usage)
	return func() ([]scenario.Trace, error) { return scenario.LoadTraces(strings.Split(*v, ",")...) }
}

// traceFlag defines --trace, one trace file (by default name), and returns
// what loads it once the flags are parsed.
func traceFlag(fs *flag.FlagSet, usage, name string) func() (scenario.Trace, error) {
	v := fs.String("trace", name, usage)
	return func() (scenario.Trace, error) {
		ts, err := scenario.LoadTraces(*v)
		if err != nil {
			return scenario.Trace{}, err
		}
		return ts[0], nil
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

// truncationPolicyFlags defines the truncation policy's params as flags
// (verb: what it does to old tool results) and returns them once parsed.
func truncationPolicyFlags(fs *flag.FlagSet, verb string) func() map[string]any {
	olderThan := fs.Int("older-than", 2, verb+" tool results older than this many assistant turns")
	maxChars := fs.Int("max-chars", 200, "head/tail stub length in characters")
	return func() map[string]any { return map[string]any{"older_than": *olderThan, "max_chars": *maxChars} }
}
