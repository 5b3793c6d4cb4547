package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func init() {
	registerBench(benchScenario{
		Name:    "vllm",
		Summary: "vLLM's CPU build with and without the kvpilot connector: misses, hits in a fresh process, vLLM's own prefix hit, a host restart",
		Run:     runBenchVLLM,
	})
}

func runBenchVLLM(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench vllm", "[--json] [--plot FILE.svg] [--models LIST] [--tokens N] [--rounds N] [--workdir DIR] [--python PATH] [-v]",
		"Runs host/bench/python/kvbench/vllm: per model, a kvpilot host and three vLLM\n"+
			"processes (CPU build, one without the connector, two with it), and per round a\n"+
			"new random prompt through the arms, interleaved: a miss without the connector,\n"+
			"a miss with it (saving to kvpilot), a fresh process served from kvpilot,\n"+
			"vLLM's own prefix hit, and a hit after the host restarted with SIGTERM.\n"+
			"Ratios per round, medians reported. Targets: on SmolLM2-135M-Instruct a miss\n"+
			"with the connector <= 1.02x one without, a fresh process's hit <= 0.25x a full\n"+
			"prefill and <= 1.2x vLLM's own prefix hit; on the save-heavy random Llama a\n"+
			"miss <= 1.10x; every hit answers as vLLM alone. Starts vLLM many times: minutes.", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	plot := fs.String("plot", "", "write an SVG bar chart of the arms to this file")
	var o scenario.VLLMOptions
	models := fs.String("models", "", "comma-separated models (smollm2, save-heavy-llama); default all")
	fs.IntVar(&o.Tokens, "tokens", 4000, "prompt length in tokens")
	fs.IntVar(&o.Rounds, "rounds", 3, "measured rounds")
	fs.StringVar(&o.Workdir, "workdir", "", "keep the hosts' data and vLLM's logs here")
	fs.StringVar(&o.Python, "python", "", "interpreter with kvpilot and vLLM (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the Python side's progress")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *models != "" {
		o.Models = strings.Split(*models, ",")
	}
	bin, err := kvpilotBinary()
	if err != nil {
		return err
	}
	o.Kvpilot = bin
	if *verbose {
		o.Stderr = os.Stderr
	}
	rep, err := scenario.RunVLLM(ctx, o)
	if err != nil {
		return fmt.Errorf("bench vllm: %w", err)
	}
	return benchOutput(ctx, stdout, rep, *asJSON, *plot, "kvpilot bench vllm")
}

// kvpilotBinary is the kvpilot beside this binary (make build puts both
// in bin/), else the one on PATH.
func kvpilotBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "kvpilot")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("kvpilot"); err == nil {
		return p, nil
	}
	return "", errors.New("no kvpilot binary beside kvpilot-bench or on PATH: run make build")
}
