// Command demo is `make demo`: it replays real agent sessions from
// examples/traces through kvpilot's front door (the OpenAI API of `kvpilot
// serve`, gateway.listen) as a harness does, resending each session's full
// history every turn, to the reference engine's HTTP server. It runs three
// hosts (`kvpilot serve`, a child process on a temporary data directory):
//
//   - a prefix cache alone: no edits (policies off, auto_splice off);
//   - a prefix cache with the same edits: the front door applies the
//     truncation and think-evict policies' rules to the messages
//     (gateway.policies), and the cache re-prefills after each edit, as
//     Anthropic's server does;
//   - kvpilot with the four built-in policies of examples/demo/kvpilot.yaml
//     and auto_splice: the same edits, spliced in the cache.
//
// It prints what each spent and what the directives saved, checks what the
// engine received (edited messages), and stops and removes everything.
//
//	go run ./examples/demo --kvpilot bin/kvpilot --config examples/demo/kvpilot.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	kvpilot, config string
	requests        int
	pageSize        int
	// idleWait is how long the idle session stays away (past idle-pause's
	// idle_after and a few ticks).
	idleWait float64
}

func run() error {
	o := options{idleWait: 4}
	flag.StringVar(&o.kvpilot, "kvpilot", "bin/kvpilot", "the kvpilot binary")
	flag.StringVar(&o.config, "config", "examples/demo/kvpilot.yaml", "the demo host's config (policies on)")
	flag.IntVar(&o.requests, "requests", 20, "requests per session")
	flag.IntVar(&o.pageSize, "page-size", 16, "tokens per page (the config's index.page_size)")
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
	sessions, err := demoSessions(o)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "demo: %d sessions from the agent traces behind one 4K-token system block\n", len(sessions))
	cfgs, cleanup, err := passConfigs(o.config)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	rep := &report{}
	for _, pc := range cfgs {
		res, err := pass(ctx, o, pc, sessions)
		if err != nil {
			return nil, err
		}
		rep.passes = append(rep.passes, res)
	}
	return rep, nil
}

type session struct {
	id    string
	turns []scenario.Turn
}

// demoSessions: three working sessions (Claude Code with its thinking,
// debug-gym, SWE-agent) and one that goes idle after three requests and
// comes back at the end.
func demoSessions(o options) ([]session, error) {
	system := scenario.SystemBlock("agent", 4000)
	specs := []struct {
		id, trace string
		n         int
	}{
		{"idle", scenario.TraceSWESmith, 4},
		{"claude-code", scenario.TraceOpus, o.requests},
		{"debug-gym", scenario.TraceDebugGym, o.requests},
		{"swe-agent", scenario.TraceSWEAgent, o.requests},
	}
	var out []session
	for _, s := range specs {
		ts, err := scenario.LoadTraces(s.trace)
		if err != nil {
			return nil, err
		}
		out = append(out, session{id: s.id, turns: scenario.ChatTurns(cutTrace(ts[0], 3000), system, s.n)})
	}
	return out, nil
}

// cutTrace cuts every message to its first n bytes (a rune boundary), as
// the demo always has, so a session fits the demo's tiers.
func cutTrace(tr scenario.Trace, n int) scenario.Trace {
	out := tr
	out.Messages = make([]chat.Message, len(tr.Messages))
	for i, m := range tr.Messages {
		m.Content, m.ThinkingText = cut(m.Content, n), cut(m.ThinkingText, n)
		out.Messages[i] = m
	}
	return out
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}
