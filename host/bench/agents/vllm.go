package agents

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/promtext"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/bench/vllmserver"
	"github.com/kvpilot/kvpilot/host/freeport"
)

// The vLLM arms: vLLM's CPU build serving SmolLM2, its own prefix cache on
// in every arm (kvpilot adds to it, it does not replace it), sized from a
// reference pass that also gives every request's greedy answer.

// stagingPages is the host's device tier in connector mode: the shared
// memory the connector stages pages through (a SmolLM2 page of 32 tokens
// is 720 KiB).
const stagingPages = 512

// reference runs every request alone, in order, on a vLLM with no prefix
// cache (each a full prefill, one at a time: no batch shape but its own),
// and returns the answers and each session's longest prompt.
func reference(ctx context.Context, p Params, ss []session, dir string, prog scenario.Progress) (map[[2]int]string, []int, error) {
	v, err := vllmserver.Start(ctx, vllmserver.Options{Python: p.Python, PageSize: p.PageSize, MaxNumSeqs: 1, Dir: dir})
	if err != nil {
		return nil, nil, fmt.Errorf("reference: %w", err)
	}
	defer v.Close()
	answers := map[[2]int]string{}
	longest := make([]int, len(ss))
	url := v.URL + "/v1/chat/completions"
	for si, s := range ss {
		for ti, t := range s.turns {
			say(prog, "agents reference: session %d/%d request %d/%d", si+1, len(ss), ti+1, len(s.turns))
			r, err := scenario.StreamChat(ctx, url, vllmserver.Model, s.id, t.Messages)
			if err != nil {
				return nil, nil, fmt.Errorf("reference: session %s request %d: %w", s.id, ti, err)
			}
			answers[[2]int{si, ti}] = r.Text
			longest[si] = max(longest[si], r.Prompt)
		}
	}
	return answers, longest, nil
}

func runVLLM(ctx context.Context, p Params, ss []session, prog scenario.Progress) (*Report, error) {
	root := p.Workdir
	if root == "" {
		dir, err := os.MkdirTemp("", "kvpilot-bench-agents-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	if p.Flood {
		return runFlood(ctx, p, ss, root, prog)
	}
	refDir := filepath.Join(root, "reference")
	if err := os.MkdirAll(refDir, 0o700); err != nil {
		return nil, err
	}
	answers, longest, err := reference(ctx, p, ss, refDir, prog)
	if err != nil {
		return nil, err
	}
	ws, top := 0, 0
	for _, n := range longest {
		ws += n + 16 // the answer
		top = max(top, n+16)
	}
	// A request longer than the engine's context is refused; the small
	// engine must still hold one whole request (vLLM checks at start).
	maxLen := (top + p.PageSize) / p.PageSize * p.PageSize
	smallTokens := max(int(p.KVFraction*float64(ws)), maxLen+p.PageSize)
	sizes := map[string]int64{
		ArmSmall: int64(smallTokens) * vllmserver.TokenBytes, ArmBig: int64(ws+ws/4) * vllmserver.TokenBytes,
		ArmKvpilot: int64(smallTokens) * vllmserver.TokenBytes, ArmPolicies: int64(smallTokens) * vllmserver.TokenBytes,
	}
	hostPages := (ws+ws/4)/p.PageSize + 64
	rep := &Report{Scenario: "agents", Params: p, WorkingSetTokens: ws, Arms: map[string]Arm{}, Reference: map[string]string{}}
	for k, v := range answers {
		rep.Reference[fmt.Sprintf("%d/%d", k[0], k[1])] = v
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("engine-small holds %d tokens (%.2f of the working set), max_model_len %d",
		smallTokens, float64(smallTokens)/float64(ws), maxLen))
	for _, arm := range p.Arms {
		dir := filepath.Join(root, arm)
		a, err := vllmArm(ctx, p, arm, ss, dir, vllmserver.Options{Python: p.Python, PageSize: p.PageSize, KVBytes: sizes[arm],
			MaxModelLen: maxLen, MaxNumSeqs: min(len(ss), 8), PrefixCaching: true, RetryAfterS: 0.5, Dir: dir}, hostPages, prog)
		if err != nil {
			return nil, fmt.Errorf("agents %s: %w", arm, err)
		}
		a.EngineKVBytes = sizes[arm]
		agree(&a, answers)
		rep.Arms[arm] = a
	}
	floor := &Agreement{}
	for _, arm := range []string{ArmSmall, ArmBig} {
		if a, ok := rep.Arms[arm]; ok && a.Answers != nil {
			floor.Compared += a.Answers.Compared
			floor.Same += a.Answers.Same
		}
	}
	if floor.Compared > 0 {
		floor.Share = math.Round(float64(floor.Same)/float64(floor.Compared)*1000) / 1000
		rep.NoiseFloor = floor
	}
	rep.judge()
	return rep, nil
}

// vllmArm runs one arm on a fresh vLLM (and, for the kvpilot arms, a fresh
// host process).
func vllmArm(ctx context.Context, p Params, arm string, ss []session, dir string, vo vllmserver.Options, hostPages int, prog scenario.Progress) (Arm, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Arm{}, err
	}
	withHost := arm == ArmKvpilot || arm == ArmPolicies
	var (
		h            *hostProc
		gw, hostHTTP string
		err          error
	)
	if withHost {
		for _, a := range []*string{&vo.Addr, &gw, &hostHTTP} {
			if *a, err = freeport.Addr(); err != nil {
				return Arm{}, err
			}
		}
		if h, err = startHost(ctx, p.Kvpilot, dir, vllmHostConfig(p, arm, hostPages, gw, vo.Addr, hostHTTP)); err != nil {
			return Arm{}, err
		}
		defer h.stop()
		vo.Socket = h.engineSocket()
	}
	say(prog, "agents %s: starting vLLM (%d MiB of KV)", arm, vo.KVBytes>>20)
	v, err := vllmserver.Start(ctx, vo)
	if err != nil {
		return Arm{}, err
	}
	defer v.Close()
	t := target{url: v.URL + "/v1/chat/completions", model: vllmserver.Model}
	if arm == ArmPolicies {
		t.url = "http://" + gw + "/v1/chat/completions"
	}
	before, err := v.Counters(ctx)
	if err != nil {
		return Arm{}, err
	}
	started := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	var smp *sampler
	sampled := make(chan struct{})
	if withHost {
		smp = &sampler{control: h.controlSocket(), rss: h.rss,
			capacity: map[string]int64{"device": stagingPages, "host": int64(hostPages), "disk": int64(hostPages)},
			hits:     func(ctx context.Context) float64 { c, _ := v.Counters(ctx); return c.ExternalHits }}
		go func() { defer close(sampled); smp.run(sctx, started, 500*time.Millisecond) }()
	} else {
		close(sampled)
	}
	var (
		fault    *FaultReport
		finished func(int)
		faulted  = make(chan struct{})
	)
	if withHost && p.Fault != FaultNone {
		fault = &FaultReport{Kind: p.Fault}
		finished = faultHalfway(ctx, p, h, fault, requests(ss)/2, started, faulted)
	} else {
		close(faulted)
	}
	say(prog, "agents %s: %d sessions, %d requests", arm, len(ss), requests(ss))
	rs, wall := drive(ctx, t, ss, started, finished)
	<-faulted
	// A few more samples: saves land behind the requests.
	sleep(ctx, time.Second)
	stopSampling()
	<-sampled
	after, err := v.Counters(ctx)
	if err != nil {
		return Arm{}, err
	}
	a := summarize(rs, wall)
	c := after.Sub(before)
	a.Engine = &c
	a.CachedBy = map[string]int{"device": int(c.LocalHits), "kvpilot": int(c.ExternalHits)}
	if withHost {
		a.Host = smp.trace()
		a.Host.bound(int64(p.PageSize) * vllmserver.TokenBytes)
		a.HostPages = hostPages
		a.HostCounters = hostCounters(ctx, "http://"+hostHTTP+"/metrics")
	}
	if fault != nil {
		fault.resumed(a.Host.Samples)
		a.Fault = fault
	}
	return a, nil
}

// faultHalfway returns what drive tells of each finished request: once
// half are done it hits the host with the fault (while the other sessions
// keep going), keeps it down for p.FaultDown, starts it again, records
// when in f and closes done.
func faultHalfway(ctx context.Context, p Params, h *hostProc, f *FaultReport, half int, started time.Time, done chan struct{}) func(int) {
	hit := func() {
		defer close(done)
		f.AtS = round(time.Since(started).Seconds())
		sig := syscall.SIGKILL
		if p.Fault == FaultSIGTERM {
			sig = syscall.SIGTERM
		}
		h.signal(sig)
		sleep(ctx, p.FaultDown)
		if err := h.start(ctx); err != nil {
			f.Error = err.Error()
		}
		f.RestartedAtS = round(time.Since(started).Seconds())
	}
	return func(n int) {
		if n == half {
			go hit()
		}
	}
}

// vllmHostConfig is a kvpilot arm's host: connector mode (vLLM tokenizes:
// the front door asks its /tokenize), a host tier for the working set and
// a disk tier as large, and for the policies arm the front door before
// vLLM at upstream with the four built-in policies, their edits spliced.
func vllmHostConfig(p Params, arm string, hostPages int, gateway, upstream, metrics string) map[string]any {
	policies := arm == ArmPolicies
	cfg := map[string]any{
		"index":  map[string]any{"page_size": p.PageSize, "auto_splice": policies},
		"engine": map[string]any{"tokenizer": ""},
		"tiers": map[string]any{
			"device": map[string]any{"capacity_pages": stagingPages},
			"host":   map[string]any{"capacity_pages": hostPages},
			"disk":   map[string]any{"capacity_pages": hostPages},
			"remote": map[string]any{"capacity_pages": 0},
		},
		"http":     map[string]any{"listen": metrics},
		"nats":     map[string]any{"listen": ""},
		"log":      map[string]any{"level": "warn"},
		"policies": []any{},
	}
	if policies {
		cfg["gateway"] = map[string]any{"listen": gateway, "upstream": "http://" + upstream + "/v1"}
		var ps []any
		// idle-pause waits past the longest tool time: no session idles here.
		for _, pol := range builtinPolicies("60s") {
			ps = append(ps, map[string]any{"name": pol.Name, "builtin": pol.Builtin, "params": pol.Params})
		}
		cfg["policies"] = ps
	}
	return cfg
}

// hostCounters are the host's counts of what it did for the engine and
// the front door, by outcome: its engine calls that did not succeed (a
// refused save or load), the front door's splices and its waits for a
// session's saves. Counts since the host's last start.
func hostCounters(ctx context.Context, url string) map[string]float64 {
	samples, err := promtext.Get(ctx, url)
	if err != nil {
		return map[string]float64{"unread": 1}
	}
	out := map[string]float64{}
	for _, s := range samples {
		switch s.Name {
		case "kvpilot_engine_requests_total":
			if o := s.Label("outcome"); o != "ok" {
				out["engine."+s.Label("call")+"."+o] += s.Value
			}
		case "kvpilot_gateway_engine_splices_total":
			out["splices."+s.Label("outcome")] += s.Value
		case "kvpilot_gateway_save_waits_total":
			out["save_waits."+s.Label("outcome")] += s.Value
		case "kvpilot_gateway_save_wait_seconds_total":
			out["save_wait_s"] += s.Value
		}
	}
	return out
}
