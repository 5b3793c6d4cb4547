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

// The scenarios whose driver is written in Python (scenario.PyScenario):
// their own flags are the driver's, defined here for --help and checked
// by type, and handed to it by name as given; one left at its zero value
// (0, "") is left out, so the driver's own default holds.

// realModelFlags defines the flags of `kvpilot bench real-model` (its row
// in scenarios.go) and returns what runs it.
func realModelFlags(fs *flag.FlagSet) runFunc {
	var o scenario.PyOptions
	pageSizeFlag(fs, &o.PageSize)
	fs.Int("tokens", 4096, "approximate prompt length")
	fs.String("model", "", "the model: smollm2 (the default), or llama, qwen2, linear, mla (random weights)")
	return pythonFlags(fs, scenario.RealModel, &o, nil, "tokens", "model")
}

// spliceQualityFlags defines the flags of `kvpilot bench splice-quality`.
func spliceQualityFlags(fs *flag.FlagSet) runFunc {
	fs.Int("cases", 0, "run the first N cases (0: all)")
	fs.Var(&repeated{}, "case", "run this case (repeatable; the names are in the JSON's cases)")
	fs.Int("context-tokens", 0, "longest context in tokens (the Python side's default when 0)")
	fs.Float64("max-kl", 0, "the guard's budget, mean KL per token (the default budget when 0)")
	fs.String("fresh", "", "what the request brings that the cache lacks: last (its new messages, as through the front door to an engine that caches its answers; the default), answer (the previous answer too, as the vLLM connector saves prompts only) or page (the last partial page)")
	fs.String("set", "", "which cases: default (the benchmark's own, which its figures and the guard's constants come from) or held-out (other turns of the same sessions, none of it tuned on)")
	fs.String("kv-dtype", "", "the KV pages' dtype: fp32 (the model's, the default), bf16, fp16, fp8_e4m3 or fp8_e5m2; the reference re-prefills into a cache of the same dtype")
	return pythonFlags(fs, scenario.SpliceQuality, &scenario.PyOptions{}, nil, "cases", "case", "context-tokens", "max-kl", "fresh", "set", "kv-dtype")
}

// vllmFlags defines the flags of `kvpilot bench vllm`.
func vllmFlags(fs *flag.FlagSet) runFunc {
	fs.String("models", "", "comma-separated models (smollm2, save-heavy-llama, smollm2-fp8, deepseek-v2-mla, tp2-llama, hybrid-swa-llama)")
	fs.String("config", "", "comma-separated configurations, each running its models: bf16 (smollm2, save-heavy-llama; the default), tp2 (two tensor-parallel ranks), fp8 (an fp8_e4m3 KV cache), mla (a DeepSeek-V2 geometry), swa (sliding-window layers beside full ones)")
	fs.Int("tokens", 4000, "prompt length in tokens")
	fs.Int("rounds", 3, "measured rounds")
	fs.String("workdir", "", "keep the hosts' data and vLLM's logs here")
	// The driver's hosts are processes of their own: it stops one with
	// SIGTERM and starts it again.
	hosts := func(o *scenario.PyOptions) error {
		bin, err := kvpilotBinary()
		o.Args = append(o.Args, "--kvpilot", bin)
		return err
	}
	return pythonFlags(fs, scenario.VLLM, &scenario.PyOptions{}, hosts, "models", "config", "tokens", "rounds", "workdir")
}

// pythonFlags defines what every Python-driven scenario takes (--python,
// -v) and returns what runs s with o, the flags named driver passed on,
// and prepare's additions.
func pythonFlags(fs *flag.FlagSet, s *scenario.PyScenario, o *scenario.PyOptions, prepare func(*scenario.PyOptions) error, driver ...string) runFunc {
	fs.StringVar(&o.Python, "python", "", "interpreter with the kvpilot package, and vLLM for bench vllm (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	verbose := fs.Bool("v", false, "show the Python side's logs (and the host's)")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		o := *o
		for _, name := range driver {
			f := fs.Lookup(name)
			vals := []string{f.Value.String()}
			if r, ok := f.Value.(*repeated); ok {
				vals = *r
			}
			for _, v := range vals {
				if v != "0" && v != "" {
					o.Args = append(o.Args, "--"+name, v)
				}
			}
		}
		if *verbose {
			o.Stderr = os.Stderr
		}
		if prepare != nil {
			if err := prepare(&o); err != nil {
				return nil, err
			}
		}
		return s.Run(ctx, o)
	}
}

// repeated collects a flag given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

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
