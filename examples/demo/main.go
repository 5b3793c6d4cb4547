// Command demo is `make demo`: it starts a kvpilot host (`kvpilot serve`,
// a child process on a temporary data directory) twice — once as a plain
// prefix cache, once with the four built-in policies of
// examples/demo/kvpilot.yaml — replays real agent sessions from
// shared/traces through the reference engine against each, and prints what
// the directives did and what they saved. It stops both hosts and removes
// their directories by itself.
//
//	go run ./examples/demo --kvpilot bin/kvpilot --config examples/demo/kvpilot.yaml
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/bench"
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
}

func run() error {
	var o options
	flag.StringVar(&o.kvpilot, "kvpilot", "bin/kvpilot", "the kvpilot binary")
	flag.StringVar(&o.config, "config", "examples/demo/kvpilot.yaml", "the demo host's config (policies on)")
	flag.IntVar(&o.requests, "requests", 20, "requests per session")
	flag.IntVar(&o.pageSize, "page-size", 16, "tokens per page (the config's index.page_size)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	sessions, err := demoSessions(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "demo: %d sessions from shared/traces behind one 4K-token system block\n", len(sessions))
	base, err := plainConfig(o.config)
	if err != nil {
		return err
	}
	defer os.Remove(base)
	plain, err := pass(ctx, o, base, "prefix cache only", sessions)
	if err != nil {
		return err
	}
	pol, err := pass(ctx, o, o.config, "kvpilot + 4 policies", sessions)
	if err != nil {
		return err
	}
	return report(plain, pol)
}

type session struct {
	id       string
	requests []bench.Request
}

// demoSessions: three working sessions (Claude Code with its thinking
// rendered, debug-gym, SWE-agent) and one that goes idle after three
// requests and comes back at the end.
func demoSessions(o options) ([]session, error) {
	system := bench.SystemBlock("agent", 4000)
	specs := []struct {
		id, trace string
		thinking  bool
		n         int
	}{
		{"idle", bench.TraceSWESmith, false, 4},
		{"claude-code", bench.TraceOpus, true, o.requests},
		{"debug-gym", bench.TraceDebugGym, false, o.requests},
		{"swe-agent", bench.TraceSWEAgent, false, o.requests},
	}
	var out []session
	for _, s := range specs {
		ts, err := bench.LoadTraces(s.trace)
		if err != nil {
			return nil, err
		}
		rs := bench.Render(ts[0], bench.RenderOptions{System: system, Thinking: s.thinking, MaxMessageChars: 3000, MaxRequests: s.n})
		out = append(out, session{id: s.id, requests: rs})
	}
	return out, nil
}

// plainConfig writes the demo config without its policies and with
// auto_splice off: the same host as a plain prefix cache.
func plainConfig(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("demo config: %w", err)
	}
	text := string(b)
	if i := strings.Index(text, "\npolicies:"); i >= 0 {
		text = text[:i+1]
	}
	text = strings.Replace(text, "auto_splice: true", "auto_splice: false", 1)
	f, err := os.CreateTemp("", "kvpilot-demo-plain-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(text + "policies: []\n")
	return f.Name(), err
}

// result is one pass: the engine's totals, the idle session's return,
// and the audit log's directives.
type result struct {
	name       string
	totals     refengine.Totals
	idleReturn refengine.TurnStats
	directives []auditRecord
	pageBytes  int64
	fillTokens int64
}

type auditRecord struct {
	Source string `json:"source"`
	Verb   string `json:"verb"`
	Status string `json:"status"`
	Code   string `json:"code"`
	Effect struct {
		Blocks int   `json:"blocks"`
		Tokens int64 `json:"tokens"`
	} `json:"effect"`
}

func pass(ctx context.Context, o options, config, name string, sessions []session) (*result, error) {
	dir, err := os.MkdirTemp("", "kvpilot-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(os.Stderr, "demo: %s: starting %s serve --config %s\n", name, o.kvpilot, config)
	cmd := exec.Command(o.kvpilot, "serve", "--config", config)
	cmd.Env = append(os.Environ(), "KVPILOT_DATA_DIR="+dir, "KVPILOT_LOG__FORMAT=text", "KVPILOT_LOG__LEVEL=warn")
	logf, err := os.Create(filepath.Join(dir, "host.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the host: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	socket := filepath.Join(dir, "run", "engine.sock")
	if err := waitFor(ctx, socket, exited, filepath.Join(dir, "host.log")); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	e, err := refengine.New(rctx, refengine.Config{Socket: socket, EngineID: "demo", Model: refengine.GQA(o.pageSize), Cost: refengine.DefaultCost, Seed: 1})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: register the reference engine: %w", name, err)
	}
	defer e.Close()
	// The engine prefills splice replacements when the host asks (fill orders).
	fills := &refengine.FillServer{}
	fctx, fcancel := context.WithCancel(ctx)
	fdone := make(chan struct{})
	go func() { defer close(fdone); _ = fills.ServeFills(fctx, e) }()
	defer func() { fcancel(); <-fdone }()
	lay := e.Layout()
	res := &result{name: name, pageBytes: int64(lay.PageBytes())}
	prog := bench.TerminalProgress(os.Stderr)
	defer bench.EndProgress(os.Stderr, prog)
	turn := func(s session, i int) (refengine.TurnStats, error) {
		r := s.requests[i]
		st, err := e.Run(ctx, refengine.TurnRequest{Session: s.id, Tenant: "demo", Tokens: r.Prompt, Output: r.Output, Messages: r.EngineMessages()})
		if err != nil {
			return st, fmt.Errorf("%s: session %s request %d: %w", name, s.id, i+1, err)
		}
		return st, nil
	}
	idle := sessions[0]
	for i := 0; i < len(idle.requests)-1; i++ {
		if _, err := turn(idle, i); err != nil {
			return nil, err
		}
	}
	quiet := time.Now()
	for i := 0; ; i++ {
		more := false
		for _, s := range sessions[1:] {
			if i < len(s.requests) {
				more = true
				if _, err := turn(s, i); err != nil {
					return nil, err
				}
			}
		}
		if !more {
			break
		}
		if prog != nil {
			prog("demo: %s: request %d of each session", name, i+1)
		}
	}
	// The idle session has been quiet past idle-pause's idle_after (2s)
	// and a few ticks; now it comes back.
	if wait := 4*time.Second - time.Since(quiet); wait > 0 {
		time.Sleep(wait)
	}
	st, err := turn(idle, len(idle.requests)-1)
	if err != nil {
		return nil, err
	}
	res.idleReturn = st
	time.Sleep(1500 * time.Millisecond) // let the policies' last directives land in the audit log
	res.totals = e.Totals()
	res.fillTokens = fills.Tokens.Load()
	res.directives, err = readAudit(filepath.Join(dir, "audit.log"))
	return res, err
}

func waitFor(ctx context.Context, socket string, exited <-chan error, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("the host exited at start (%v):\n%s", err, b)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the host did not open its engine socket within 60s")
		}
	}
}

func readAudit(path string) ([]auditRecord, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20)
	for sc.Scan() {
		var r auditRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Verb != "" {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

func report(plain, pol *result) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nkvpilot demo: the same real agent sessions through the reference engine, twice\n\n")
	fmt.Fprintf(tw, "\t%s\t%s\n", plain.name, pol.name)
	row := func(label string, f func(*result) string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", label, f(plain), f(pol)) }
	row("requests", func(r *result) string { return fmt.Sprint(r.totals.Turns) })
	row("prompt tokens", func(r *result) string { return fmt.Sprint(r.totals.Prompt) })
	row("cached tokens", func(r *result) string {
		return fmt.Sprintf("%d (%.1f%%)", r.totals.Cached, 100*float64(r.totals.Cached)/float64(max(1, r.totals.Prompt)))
	})
	row("prefilled tokens (+ splice fills)", func(r *result) string { return fmt.Sprintf("%d (+%d)", r.totals.Prefilled, r.fillTokens) })
	row("modelled TTFT, all requests", func(r *result) string { return fmt.Sprintf("%.1f s", r.totals.TTFTms/1e3) })
	row("keys checked against the contract", func(r *result) string {
		return fmt.Sprintf("%d (%d rotated)", r.totals.CheckedRows, r.totals.RoundedRows)
	})
	row("idle session's return: cached", func(r *result) string {
		return fmt.Sprintf("%d/%d, %d pages loaded back", r.idleReturn.Cached, r.idleReturn.Prompt, r.idleReturn.LoadedPages)
	})
	if err := tw.Flush(); err != nil {
		return err
	}

	type key struct{ source, verb, status string }
	type agg struct {
		n      int
		blocks int
		tokens int64
		codes  map[string]int
	}
	by := map[key]*agg{}
	for _, d := range pol.directives {
		k := key{d.Source, d.Verb, d.Status}
		a := by[k]
		if a == nil {
			a = &agg{codes: map[string]int{}}
			by[k] = a
		}
		a.n++
		a.blocks += d.Effect.Blocks
		a.tokens += d.Effect.Tokens
		if d.Code != "" {
			a.codes[d.Code]++
		}
	}
	keys := make([]key, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.source != b.source {
			return a.source < b.source
		}
		if a.verb != b.verb {
			return a.verb < b.verb
		}
		return a.status < b.status
	})
	fmt.Fprintf(tw, "\ndirectives in the audit log (%s)\n\nsource\tverb\tstatus\tcount\tblocks\ttokens\tcodes\n", pol.name)
	for _, k := range keys {
		a := by[k]
		var codes []string
		for c, n := range a.codes {
			codes = append(codes, fmt.Sprintf("%s x%d", c, n))
		}
		sort.Strings(codes)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", k.source, k.verb, k.status, a.n, a.blocks, a.tokens, strings.Join(codes, ", "))
	}
	if len(keys) == 0 {
		fmt.Fprintf(tw, "(none)\n")
	}
	paused := 0
	for _, d := range pol.directives {
		if d.Verb == "Pause" && d.Status == "ok" {
			paused += d.Effect.Blocks
		}
	}
	fmt.Fprintf(tw, "\ndevice memory idle-pause moved to the disk tier: %d pages (%.1f MiB at %d bytes a page)", paused, float64(int64(paused)*pol.pageBytes)/(1<<20), pol.pageBytes)
	saved := plain.totals.TTFTms - pol.totals.TTFTms
	fmt.Fprintf(tw, "\nmodelled TTFT saved by the directives: %.1f s (%.1f%%); prefill saved: %d tokens\n",
		saved/1e3, 100*saved/max(1, plain.totals.TTFTms), int64(plain.totals.Prefilled)+plain.fillTokens-int64(pol.totals.Prefilled)-pol.fillTokens)
	return tw.Flush()
}
