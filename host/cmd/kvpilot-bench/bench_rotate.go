package main

import (
	"context"
	"flag"

	"github.com/kvpilot/kvpilot/host/bench/rotatebench"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/kernels"
)

// rotateFlags defines the flags of `kvpilot bench rotate` (its row in
// scenarios.go) and returns what runs it.
func rotateFlags(fs *flag.FlagSet) runFunc {
	var o rotatebench.Options
	fs.StringVar(&o.Device, "device", "cpu", "cpu, cuda, or auto (cuda when a GPU is present)")
	fs.StringVar(&o.Model, "model", "gqa", "gqa (Llama-3-8B-like K/V rows) or mla (DeepSeek [kv_c 512 | k_pe 64])")
	dtype := fs.String("dtype", "bf16", "storage dtype: bf16, fp16 or fp32")
	fs.IntVar(&o.Slots, "slots", 4096, "token slots in the arena")
	fs.IntVar(&o.Layers, "layers", 8, "layers")
	fs.IntVar(&o.Iters, "iters", 10, "measured repetitions of each arm (median reported)")
	return func(ctx context.Context, _ scenario.Progress) (scenario.Report, error) {
		var err error
		if o.DType, err = kernels.ParseDType(*dtype); err != nil {
			return nil, err
		}
		r, err := rotatebench.Run(ctx, o)
		if err != nil {
			return nil, err
		}
		return tableReport{r, scenario.JSONTable(r)}, nil
	}
}
