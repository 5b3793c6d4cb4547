package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/bench/rotatebench"
	"github.com/kvpilot/kvpilot/kernels"
)

func init() {
	registerBench(benchScenario{
		Name:    "rotate",
		Summary: "RoPE Δ-rotation throughput vs memcpy (CPU) or D2D copy (GPU) of the same bytes",
		Run:     runBenchRotate,
	})
}

func runBenchRotate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("bench rotate", "[--json] [--device cpu|cuda|auto] [--model gqa|mla] [--dtype bf16|fp16|fp32] [--slots N] [--layers N] [--iters N]",
		"Rotates the RoPE slice of every slot of a KV arena by Δ and reports GB/s of\n"+
			"RoPE bytes rotated against a copy of the same bytes in the same run\n"+
			"(targets: ratio >= 0.5 on CPU, >= 0.8 on GPU).", os.Stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	device := fs.String("device", "cpu", "cpu, cuda, or auto (cuda when a GPU is present)")
	model := fs.String("model", "gqa", "gqa (Llama-3-8B-like K/V rows) or mla (DeepSeek [kv_c 512 | k_pe 64])")
	dtype := fs.String("dtype", "bf16", "storage dtype: bf16, fp16 or fp32")
	slots := fs.Int("slots", 4096, "token slots in the arena")
	layers := fs.Int("layers", 8, "layers")
	iters := fs.Int("iters", 10, "measured repetitions of each arm (median reported)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dt, err := kernels.ParseDType(*dtype)
	if err != nil {
		return err
	}
	r, err := rotatebench.Run(ctx, rotatebench.Options{Device: *device, Model: *model, DType: dt, Slots: *slots, Layers: *layers, Iters: *iters})
	if err != nil {
		return fmt.Errorf("bench rotate: %w", err)
	}
	reportTargetsOf(ctx, r)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	r.Table(stdout)
	return nil
}
