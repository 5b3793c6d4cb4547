package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// vllmFlags defines the flags of `kvpilot bench vllm` (its row in
// scenarios.go) and returns what runs it.
func vllmFlags(fs *flag.FlagSet) runFunc {
	var o scenario.VLLMBenchOptions
	models := fs.String("models", "", "comma-separated models (smollm2, save-heavy-llama); default all")
	fs.IntVar(&o.Tokens, "tokens", 4000, "prompt length in tokens")
	fs.IntVar(&o.Rounds, "rounds", 3, "measured rounds")
	fs.StringVar(&o.Workdir, "workdir", "", "keep the hosts' data and vLLM's logs here")
	fs.StringVar(&o.Python, "python", "", "interpreter with kvpilot and vLLM (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the Python side's progress")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		if *models != "" {
			o.Models = strings.Split(*models, ",")
		}
		bin, err := kvpilotBinary()
		if err != nil {
			return nil, err
		}
		o.Kvpilot = bin
		if *verbose {
			o.Stderr = os.Stderr
		}
		return scenario.RunVLLM(ctx, o)
	}
}

// kvpilotBinary is the kvpilot beside this binary (make build puts both
// in bin/), else the one on PATH: the vllm scenario's hosts are processes
// of their own, as it stops one with SIGTERM and starts it again.
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
