package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/freeport"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// result is one pass: what the clients saw, the engine's totals, what the
// engine received, the answers, and the audit log's directives.
type result struct {
	passConfig
	requests, prompt, cached int
	ttftMs, modelledMs       float64
	engine                   refengine.Totals
	fillTokens               int64
	idleReturn               scenario.ChatResult
	upstream                 upstreamStats
	answers                  []answer
	directives               []auditRecord
	pageBytes                int64
}

// answer is one request's greedy answer, and whether the engine got it
// with edited messages.
type answer struct {
	text   string
	edited bool
}

// prefill is what the pass prefilled: prompt tokens not cached, plus the
// splices' replacements.
func (r *result) prefill() int64 { return int64(r.prompt-r.cached) + r.fillTokens }

// pass runs one pass in dir, which it empties first: every pass's host has
// its engine socket at the same path.
func pass(ctx context.Context, o options, en *engines, dir string, pc passConfig, sessions []session) (*result, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer up.Close()
	gw, err := freePort()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "demo: %s: starting %s serve --config %s\n", pc.name, o.kvpilot, pc.path)
	cmd := exec.Command(o.kvpilot, "serve", "--config", pc.path)
	cmd.Env = append(os.Environ(), "KVPILOT_DATA_DIR="+dir, "KVPILOT_LOG__FORMAT=text", "KVPILOT_LOG__LEVEL=warn",
		"KVPILOT_GATEWAY__LISTEN="+gw, "KVPILOT_GATEWAY__UPSTREAM=http://"+up.Addr().String()+"/v1",
		"KVPILOT_INDEX__PAGE_SIZE="+strconv.Itoa(o.pageSize))
	cmd.Env = append(append(cmd.Env, o.profile.hostEnv...), pc.env...)
	logf, err := os.Create(filepath.Join(dir, "host.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the host: %w", err)
	}
	// exited is closed when the host exits, with its error in waitErr: a
	// channel closed, not sent on, so every waiter sees it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
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
	if err := waitFor(ctx, socket, exited, &waitErr, filepath.Join(dir, "host.log")); err != nil {
		return nil, err
	}
	control := filepath.Join(dir, "run", "control.sock")
	be, err := en.start(ctx, o, socket, control)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pc.name, err)
	}
	defer be.close()
	cc, err := controlclient.DialUnix(control, controlclient.UnixOptions{Source: "demo"})
	if err != nil {
		return nil, fmt.Errorf("%s: control socket: %w", pc.name, err)
	}
	defer cc.Close()
	rec := newRecorder(be.handler())
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(up) }()
	defer srv.Close()
	if err := waitTCP(ctx, gw); err != nil {
		return nil, err
	}
	res := &result{passConfig: pc}
	settle := func() {}
	if o.engine == engineVLLM {
		settle = func() { waitSaved(ctx, cc) }
	}
	if err := replay(ctx, o, "http://"+gw+"/v1/chat/completions", sessions, rec, res, settle); err != nil {
		return nil, fmt.Errorf("%s: %w", pc.name, err)
	}
	time.Sleep(1500 * time.Millisecond) // let the policies' last directives land in the audit log
	res.upstream = rec.stats()
	be.finish(res, rec)
	if res.pageBytes, err = pageBytes(ctx, cc); err != nil {
		return nil, err
	}
	res.directives, err = readAudit(filepath.Join(dir, "audit.log"))
	return res, err
}

// pageBytes is the size of one page in the host's pools, from its stats.
func pageBytes(ctx context.Context, c *controlclient.UnixClient) (int64, error) {
	st, err := c.Stats(ctx)
	if err != nil {
		return 0, fmt.Errorf("host stats: %w", err)
	}
	for _, t := range st.Tiers {
		if t.Pages > 0 {
			return t.Bytes / t.Pages, nil
		}
	}
	return 0, nil
}

// waitSaved waits, at most 10 s, until the host's page counts have held
// still for half a second: vLLM's connector saves a request's pages behind
// its answer, and a harness's next turn comes after the tool or the person
// has had their seconds. Without it, on a loaded machine a pass's next
// request could find its predecessor's pages still on their way, and the
// passes' prefill (whose difference is the demo's figure) would measure
// the machine's load.
func waitSaved(ctx context.Context, c *controlclient.UnixClient) {
	deadline := time.Now().Add(10 * time.Second)
	last, still := int64(-1), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := c.Stats(ctx)
		if err != nil {
			return
		}
		var pages int64
		for _, t := range st.Tiers {
			pages += t.Pages
		}
		if pages != last {
			last, still = pages, time.Now()
		} else if time.Since(still) >= 500*time.Millisecond {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replay sends every session's requests through the front door, in
// rounds, with the idle session away until the end; settle runs after
// each request.
func replay(ctx context.Context, o options, url string, sessions []session, rec *recorder, res *result, settle func()) error {
	prog := scenario.TerminalProgress(os.Stderr)
	defer scenario.EndProgress(os.Stderr, prog)
	turn := func(s session, i int) (scenario.ChatResult, error) {
		t := s.turns[i]
		rec.expect(t.Messages)
		fills := rec.fillTokens()
		r, err := scenario.StreamChat(ctx, url, o.profile.model, s.id, t.Messages)
		if err != nil {
			return r, fmt.Errorf("session %s request %d: %w", s.id, i+1, err)
		}
		if o.verbose {
			fmt.Fprintf(os.Stderr, "demo: %s: %s request %d: %d prompt tokens, %d from the cache, %d prefilled (+%d by the front door's splice prefill), edited %v\n",
				res.name, s.id, i+1, r.Prompt, r.Cached, r.Prompt-r.Cached, rec.fillTokens()-fills, rec.lastEdited())
		}
		res.answers = append(res.answers, answer{text: r.Text, edited: rec.lastEdited()})
		res.requests++
		res.prompt += r.Prompt
		res.cached += r.Cached
		res.ttftMs += r.TTFTms
		res.modelledMs += r.ModelledMs
		settle()
		return r, nil
	}
	idle := sessions[0]
	for i := 0; i < len(idle.turns)-1; i++ {
		if _, err := turn(idle, i); err != nil {
			return err
		}
	}
	quiet := time.Now()
	for i := 0; ; i++ {
		more := false
		for _, s := range sessions[1:] {
			if i < len(s.turns) {
				more = true
				if _, err := turn(s, i); err != nil {
					return err
				}
			}
		}
		if !more {
			break
		}
		if prog != nil {
			prog("demo: %s: request %d of each session", res.name, i+1)
		}
	}
	if wait := time.Duration(o.idleWait*float64(time.Second)) - time.Since(quiet); wait > 0 {
		time.Sleep(wait)
	}
	r, err := turn(idle, len(idle.turns)-1)
	res.idleReturn = r
	return err
}

func freePort() (string, error) { return freeport.Addr() }

func waitTCP(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the front door does not accept on %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func waitFor(ctx context.Context, socket string, exited <-chan struct{}, waitErr *error, logPath string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("the host exited at start (%v):\n%s", *waitErr, b)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the host did not open its engine socket within 60s")
		}
	}
}
