package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/agents"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

// agentsFlags defines the flags of `kvpilot bench agents` (its row in
// scenarios.go) and returns what runs it.
func agentsFlags(fs *flag.FlagSet) runFunc {
	var p agents.Params
	traces := tracesFlag(fs, "trace", "comma-separated trace files, one per session round-robin", &p.Traces,
		scenario.TraceDebugGym, scenario.TraceSWEAgent, scenario.TraceOpus, scenario.TraceSWESmith, scenario.TraceSubagent)
	fs.StringVar(&p.Engine, "engine", agents.EngineVLLM, "vllm (vLLM's CPU build serving SmolLM2) or refengine (the reference engine, modelled times, seconds)")
	fs.IntVar(&p.Sessions, "sessions", 8, "sessions at once (1 to 64)")
	fs.IntVar(&p.Turns, "turns", 0, "requests per session at most (0: the engine's default, 6 on vLLM, 8 on the reference engine)")
	fs.IntVar(&p.SystemTokens, "system-tokens", 0, "the shared system block's tokens (0: the engine's default)")
	fs.IntVar(&p.MessageBytes, "message-bytes", 0, "cut every trace message to this many bytes (0: the engine's default)")
	fs.DurationVar(&p.ToolTime, "tool-time", 0, "mean tool time between a session's turns (0: 1s on vLLM, 20ms on the reference engine)")
	fs.Float64Var(&p.KVFraction, "kv-fraction", 0.2, "the small engine's KV memory as a share of the working set")
	arms := fs.String("arms", strings.Join(agents.Arms, ","), "comma-separated arms to run")
	fs.BoolVar(&p.Flood, "flood", false, "the flood instead of the arms: one VIP session's pinned system prompt against the other sessions at several times vLLM's KV memory, vLLM alone and with kvpilot (vLLM only)")
	fs.StringVar(&p.Fault, "fault", "", "hit the kvpilot arms' host halfway through: sigkill or sigterm, then a restart (vLLM only)")
	fs.DurationVar(&p.FaultDown, "fault-down", time.Second, "how long the host stays down after the fault")
	fs.Uint64Var(&p.Seed, "seed", 1, "seeds the tool times")
	fs.Float64Var(&p.TimeScale, "time-scale", 0, "the reference engine waits its modelled TTFT times this (0: 0.2)")
	fs.StringVar(&p.Python, "python", "", "interpreter with vLLM and the kvpilot package (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	fs.StringVar(&p.Workdir, "workdir", "", "keep the hosts' data and vLLM's logs here")
	load := func() error {
		p.Arms = strings.Split(*arms, ",")
		if p.Engine != agents.EngineVLLM {
			return nil
		}
		var err error
		p.Kvpilot, err = kvpilotBinary()
		return err
	}
	return func(ctx context.Context, prog scenario.Progress) (scenario.Report, error) {
		return traceRun(&p, agents.Run, traces, load)(ctx, prog)
	}
}
