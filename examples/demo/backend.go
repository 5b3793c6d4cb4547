package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/bench/vllmserver"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
)

// The engines a demo pass can run behind the front door.
const (
	// engineVLLM is vLLM's CPU build serving SmolLM2-135M-Instruct with
	// kvpilot's connector (connector mode): what the model says is a
	// trained model's, so the splice's answers can be held to the
	// re-prefill's.
	engineVLLM = "vllm"
	// engineRef is the reference engine (arena mode): deterministic K/V
	// for every token and the splice contract checked on every cached row,
	// at a modelled cost, in seconds; its answers are not a model's.
	engineRef = "refengine"
)

// backend is the engine behind one pass's front door.
type backend interface {
	// handler serves the engine's HTTP API; the recorder forwards to it.
	handler() http.Handler
	// finish records what the engine counted into res (rec saw its requests).
	finish(res *result, rec *recorder)
	close()
}

// engineProfile is what the demo sizes for an engine: the page size, the
// host's settings it needs beside the demo config, the model name to ask
// for and the workload (a real model on two cores gets a smaller one, and
// SmolLM2 reads at most 8,192 tokens).
type engineProfile struct {
	pageSize                   int
	hostEnv                    []string
	model                      string
	systemTokens, messageBytes int
	requests                   int
	// idleAfter replaces idle-pause's idle_after in the demo config ("":
	// the config's own) and idleWait is how long the idle session stays
	// away: a real model takes seconds a request, so a working session
	// waits for the others' requests longer than the reference engine's
	// idle_after, and would be paused between its own.
	idleAfter string
	idleWait  float64
}

func profileOf(engine string) (engineProfile, error) {
	switch engine {
	case engineRef:
		return engineProfile{pageSize: 16, model: scenario.RefModel, systemTokens: 4000, messageBytes: 3000, requests: 20, idleWait: 4}, nil
	case engineVLLM:
		return engineProfile{
			pageSize: 32,
			// vLLM tokenizes itself (the front door asks its /tokenize), and
			// a SmolLM2 page is 720 KiB: tiers of the pages the sessions
			// need, not the reference engine's.
			hostEnv: []string{"KVPILOT_ENGINE__TOKENIZER=", "KVPILOT_TIERS__DEVICE__CAPACITY_PAGES=512",
				"KVPILOT_TIERS__HOST__CAPACITY_PAGES=1024", "KVPILOT_TIERS__DISK__CAPACITY_PAGES=2048"},
			model:        vllmserver.Model,
			systemTokens: 800, messageBytes: 1200, requests: 8,
			idleAfter: "60s", idleWait: 65,
		}, nil
	}
	return engineProfile{}, fmt.Errorf("--engine %q: want %s or %s", engine, engineVLLM, engineRef)
}

// engines starts each pass's engine on the host's engine socket. The
// reference engine is a new one in every pass; vLLM is one process for the
// whole demo (its start is most of a pass on two cores), with its own
// prefix cache off, so every pass starts from an empty cache, kvpilot's:
// each pass's host takes the same socket path, and the connector
// registers again with it.
type engines struct {
	// dir outlives the passes: vLLM's log is there.
	dir  string
	vllm *vllmserver.Server
}

func (en *engines) start(ctx context.Context, o options, socket, control string) (backend, error) {
	if o.engine != engineVLLM {
		return startRef(ctx, o, socket)
	}
	if en.vllm == nil {
		fmt.Fprintf(os.Stderr, "demo: starting vLLM (SmolLM2-135M-Instruct, kvpilot's connector): a minute or more\n")
		// Its own prefix cache off: every token a request does not compute
		// is kvpilot's, so a usage's cached tokens are kvpilot's pages.
		v, err := vllmserver.Start(ctx, vllmserver.Options{Python: o.python, Socket: socket, RetryAfterS: 0.5,
			PageSize: o.pageSize, Dir: en.dir})
		if err != nil {
			return nil, err
		}
		en.vllm = v
	}
	// Every pass, the first included, starts with a warm vLLM.
	if err := en.rejoin(ctx, control); err != nil {
		return nil, err
	}
	u, err := url.Parse(en.vllm.URL)
	if err != nil {
		return nil, err
	}
	return &vllmBackend{proxy: httputil.NewSingleHostReverseProxy(u)}, nil
}

// rejoin waits until vLLM's connector has registered with the pass's host
// (and warms vLLM up, so no pass pays its first forward): a short
// completion straight to vLLM (its pages are the first the host holds)
// until the host holds pages, within two minutes.
func (en *engines) rejoin(ctx context.Context, control string) error {
	c, err := controlclient.DialUnix(control, controlclient.UnixOptions{Source: "demo"})
	if err != nil {
		return err
	}
	defer c.Close()
	body := []byte(`{"model":"` + vllmserver.Model + `","prompt":"` + strings.Repeat("kvpilot demo warm-up. ", 20) +
		`","max_tokens":1,"temperature":0}`)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Post(en.vllm.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		for range 10 {
			if st, err := c.Stats(ctx); err == nil {
				for _, t := range st.Tiers {
					if t.Pages > 0 {
						return nil
					}
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vLLM's connector did not register with the new host within 2m (%s)", en.vllm.Log)
		}
	}
}

func (en *engines) close() {
	if en.vllm != nil {
		en.vllm.Close()
	}
}

func startRef(ctx context.Context, o options, socket string) (backend, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	e, err := refengine.New(rctx, refengine.Config{Socket: socket, EngineID: "demo", Model: refengine.GQA(o.pageSize), Cost: refengine.DefaultCost, Seed: 1})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("register the reference engine: %w", err)
	}
	// The engine prefills splice replacements when the host asks (fill orders).
	b := &refBackend{e: e, fills: &refengine.FillServer{}, done: make(chan struct{})}
	fctx, fcancel := context.WithCancel(ctx)
	b.stop = fcancel
	go func() { defer close(b.done); _ = b.fills.ServeFills(fctx, e) }()
	return b, nil
}

type refBackend struct {
	e     *refengine.Engine
	fills *refengine.FillServer
	stop  context.CancelFunc
	done  chan struct{}
}

func (b *refBackend) handler() http.Handler {
	return refengine.NewServer(b.e, refengine.ServerOptions{}).Handler()
}

func (b *refBackend) finish(res *result, _ *recorder) {
	res.engine = b.e.Totals()
	res.fillTokens = b.fills.Tokens.Load()
}

func (b *refBackend) close() {
	b.stop()
	<-b.done
	b.e.Close()
}

type vllmBackend struct{ proxy http.Handler }

func (b *vllmBackend) handler() http.Handler { return b.proxy }

// finish: the splices' prefills are the front door's own requests to vLLM,
// which the recorder counts.
func (b *vllmBackend) finish(res *result, rec *recorder) { res.fillTokens = rec.fillTokens() }

// close: vLLM outlives the pass (engines.close stops it).
func (b *vllmBackend) close() {}
