package agents

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// The reference engine's arms: its KV memory is the host's device tier
// (arena mode), so the engine alone is a host with no tier behind its
// device tier, and kvpilot is the same device tier with a host tier
// behind it. Its answers are not a model's: no reference pass.

// refWorkingSet is the sessions' working set in pages, and the longest
// prompt's, by the reference engine's tokenizer.
func refWorkingSet(ss []session, page int) (total, longest int) {
	for _, s := range ss {
		if len(s.turns) == 0 {
			continue
		}
		toks, _ := chatwire.Render(s.turns[len(s.turns)-1].Messages, policytest.Tokenize)
		n := (len(toks)+page-1)/page + 1 // the answer's page
		total += n
		longest = max(longest, n)
	}
	return total, longest
}

func runRef(ctx context.Context, p Params, ss []session, prog scenario.Progress) (*Report, error) {
	ws, longest := refWorkingSet(ss, p.PageSize)
	small := max(int(p.KVFraction*float64(ws)), 2*longest)
	big := ws + ws/5 + 64
	rep := &Report{Scenario: "agents", Params: p, WorkingSetTokens: ws * p.PageSize, Arms: map[string]Arm{}}
	for _, arm := range p.Arms {
		device, host := small, 0
		switch arm {
		case ArmBig:
			device = big
		case ArmKvpilot, ArmPolicies:
			host = big
		}
		a, err := refArm(ctx, p, arm, ss, device, host, max(1, device/(2*longest)), prog)
		if err != nil {
			return nil, fmt.Errorf("agents %s: %w", arm, err)
		}
		a.EnginePages, a.HostPages = device, host
		rep.Arms[arm] = a
	}
	rep.Notes = append(rep.Notes, "reference engine: modelled prefill times (time scale "+
		fmt.Sprint(p.TimeScale)+"), answers not a model's, no faults (its host runs in this process)")
	rep.judge()
	return rep, nil
}

// refArm starts a host with the front door and the reference engine's
// HTTP server behind it, and runs the load through the front door. The
// engine serves admitted requests at once and queues the rest: it fails a
// request its device tier cannot hold beside the others (arena mode),
// where vLLM's scheduler would queue it, so the arm admits as many as the
// tier holds at twice the longest prompt (a splice takes fresh pages too).
func refArm(ctx context.Context, p Params, arm string, ss []session, device, host, admitted int, prog scenario.Progress) (Arm, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Arm{}, err
	}
	defer ln.Close()
	o := scenario.RigOptions{PageSize: p.PageSize, DevicePages: device, HostPages: host, AutoSplice: arm == ArmPolicies}
	if arm == ArmPolicies {
		// The edit policies' rules, applied by the front door; the other
		// two built-ins are plugin processes of the kvpilot binary, which
		// an in-process host does not have (the vLLM form runs all four).
		rules, err := gateway.PolicyRules(builtinPolicies("60s")[:2])
		if err != nil {
			return Arm{}, err
		}
		o.Options = []daemon.Option{daemon.WithGatewayRules(rules)}
	}
	o.Adjust = func(c *config.Config) {
		c.Gateway.Listen = "127.0.0.1:0"
		c.Gateway.Upstream = "http://" + ln.Addr().String() + "/v1"
	}
	rig, err := scenario.StartRig(ctx, o)
	if err != nil {
		return Arm{}, err
	}
	defer rig.Close()
	srv := &http.Server{Handler: queued(refengine.NewServer(rig.Engine, refengine.ServerOptions{TimeScale: p.TimeScale}).Handler(), admitted)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	sctx, stop := context.WithCancel(ctx)
	smp := &sampler{control: rig.Config.ControlSocket(), capacity: map[string]int64{"device": int64(device), "host": int64(host)}}
	started := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); smp.run(sctx, started, 500*time.Millisecond) }()
	say(prog, "agents %s: %d sessions, %d requests", arm, len(ss), requests(ss))
	rs, wall := drive(ctx, target{url: "http://" + rig.Daemon.GatewayAddr() + "/v1/chat/completions", model: scenario.RefModel}, ss, started, nil)
	stop()
	<-done
	a := summarize(rs, wall)
	a.Host = smp.trace()
	return a, nil
}

// queued serves at most n requests of h at once; the others wait their
// turn (their time to first token counts the wait, as an engine's queue's).
func queued(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		defer func() { <-slots }()
		h.ServeHTTP(w, r)
	})
}

func say(prog scenario.Progress, format string, args ...any) {
	if prog != nil {
		prog(format, args...)
	}
}

// builtinPolicies are the four built-in policies as make demo runs them,
// idle-pause pausing a session idle for idleAfter.
func builtinPolicies(idleAfter string) []config.Policy {
	return []config.Policy{
		{Name: "truncation", Builtin: "truncation", Params: map[string]any{"older_than": 2, "max_chars": 200}},
		{Name: "think-evict", Builtin: "think-evict", Params: map[string]any{}},
		{Name: "idle-pause", Builtin: "idle-pause", Params: map[string]any{"idle_after": idleAfter, "lease_ttl": "10m", "renew_before": "1m"}},
		{Name: "auto-pin", Builtin: "auto-pin", Params: map[string]any{}},
	}
}
