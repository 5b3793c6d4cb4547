// Command demo is `make demo`: it replays real agent sessions from
// examples/traces through kvpilot's front door (the OpenAI API of `kvpilot
// serve`, gateway.listen) as a harness does, resending each session's full
// history every turn, to an engine's OpenAI server. It runs three hosts
// (`kvpilot serve`, a child process on a temporary data directory), each
// with an engine of its own:
//
//   - a prefix cache alone: no edits (policies off, auto_splice off);
//   - a prefix cache with the same edits: the front door applies the
//     truncation and think-evict policies' rules to the messages
//     (gateway.policies), and the cache re-prefills after each edit, as
//     Anthropic's server does;
//   - kvpilot with the four built-in policies of examples/demo/kvpilot.yaml
//     and auto_splice: the same edits, spliced in the cache.
//
// The engine (--engine) is vLLM's CPU build serving SmolLM2-135M-Instruct
// with kvpilot's connector, so the answers are a trained model's and the
// demo can say how often the splice's greedy answer is the re-prefill's;
// or the reference engine, which checks the splice contract on every
// cached row at a modelled cost and runs the demo's longer sessions in
// seconds.
//
// It prints what each pass spent and what the directives saved, checks what
// the engine received (edited messages), and stops and removes everything.
//
//	go run ./examples/demo --kvpilot bin/kvpilot --config examples/demo/kvpilot.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	kvpilot, config string
	// engine is engineVLLM or engineRef; python runs vLLM.
	engine, python string
	// sessions is how many working sessions to replay (1 to 3), requests
	// how many requests each; systemTokens and messageBytes size the
	// system block and cut every message (0: the engine's profile).
	sessions, requests         int
	systemTokens, messageBytes int
	pageSize                   int
	// idleWait is how long the idle session stays away (past idle-pause's
	// idle_after and a few ticks; 0: the engine's profile).
	idleWait float64
	// verbose prints a line per request: what the engine took from the
	// cache and what it prefilled.
	verbose bool
	// compare runs kvpilot without recompute and the re-prefill again
	// (passConfigs), to put the defaults' agreement in context.
	compare bool
	profile engineProfile
}

func run() error {
	var o options
	flag.StringVar(&o.kvpilot, "kvpilot", "bin/kvpilot", "the kvpilot binary")
	flag.StringVar(&o.config, "config", "examples/demo/kvpilot.yaml", "the demo host's config (policies on)")
	flag.StringVar(&o.engine, "engine", engineVLLM, "the engine behind the front door: vllm (SmolLM2-135M-Instruct) or refengine")
	flag.StringVar(&o.python, "python", "", "the Python that runs vLLM (default $KVPILOT_PYTHON, .venv/bin/python, python3)")
	flag.IntVar(&o.sessions, "sessions", 3, "working sessions to replay (1 to 3), beside the idle one")
	flag.IntVar(&o.requests, "requests", 0, "requests per session (0: 8 with vllm, 20 with refengine)")
	flag.BoolVar(&o.verbose, "v", false, "print each request's prompt, cached and prefilled tokens")
	flag.BoolVar(&o.compare, "compare", true, "also run kvpilot without recompute and the re-prefill again (vllm): the greedy agreement of the defaults, of no recompute, and of the re-prefill with itself")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := demo(ctx, o)
	if err != nil {
		return err
	}
	return rep.write(os.Stdout)
}

// demo runs the three passes.
func demo(ctx context.Context, o options) (*report, error) {
	p, err := profileOf(o.engine)
	if err != nil {
		return nil, err
	}
	o.profile = p
	for _, d := range []struct {
		v   *int
		def int
	}{{&o.requests, p.requests}, {&o.systemTokens, p.systemTokens}, {&o.messageBytes, p.messageBytes}, {&o.pageSize, p.pageSize}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.idleWait == 0 {
		o.idleWait = p.idleWait
	}
	sessions, err := demoSessions(o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "demo: %d sessions from the agent traces behind one %d-token system block, to %s\n", len(sessions), o.systemTokens, engineName(o.engine))
	cfgs, cleanup, err := passConfigs(o.config, p.idleAfter, o.compare && o.engine == engineVLLM)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	dir, err := os.MkdirTemp("", "kvpilot-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	en := &engines{dir: dir}
	defer en.close()
	rep := &report{engine: o.engine}
	for _, pc := range cfgs {
		res, err := pass(ctx, o, en, filepath.Join(dir, "pass"), pc, sessions)
		if err != nil {
			return nil, err
		}
		rep.passes = append(rep.passes, res)
	}
	return rep, nil
}

// engineName says in words what runs behind the front door.
func engineName(engine string) string {
	if engine == engineVLLM {
		return "vLLM serving SmolLM2-135M-Instruct"
	}
	return "the reference engine"
}

type session struct {
	id    string
	turns []scenario.Turn
}

// demoSessions: up to three working sessions (debug-gym, SWE-agent, and
// Claude Code with its thinking) and one that goes idle after three
// requests and comes back at the end.
func demoSessions(o options) ([]session, error) {
	if o.sessions < 1 || o.sessions > 3 {
		return nil, fmt.Errorf("--sessions %d: want 1 to 3", o.sessions)
	}
	system := scenario.SystemBlock("agent", o.systemTokens)
	specs := []struct {
		id, trace string
		n         int
	}{
		{"idle", scenario.TraceSWESmith, 4},
		{"debug-gym", scenario.TraceDebugGym, o.requests},
		{"swe-agent", scenario.TraceSWEAgent, o.requests},
		{"claude-code", scenario.TraceOpus, o.requests},
	}
	var out []session
	for _, s := range specs[:1+o.sessions] {
		ts, err := scenario.LoadTraces(s.trace)
		if err != nil {
			return nil, err
		}
		out = append(out, session{id: s.id, turns: scenario.ChatTurns(scenario.CutTrace(ts[0], o.messageBytes), system, s.n)})
	}
	return out, nil
}
