package scenario

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// GatewayParams shape the gateway scenario: real agent sessions resent in
// full, as a harness sends them, through the front door (OpenAI chat
// completions, streaming) to the reference engine's HTTP server, the
// truncation policy's edits applied by the front door.
type GatewayParams struct {
	EditedSessions
	// TimeScale makes the engine wait its modelled TTFT times this before
	// answering, so the TTFT measured through HTTP carries the prefill.
	TimeScale float64 `json:"time_scale"`
}

func (p *GatewayParams) defaults() {
	p.EditedSessions.defaults()
	p.TimeScale = cmp.Or(p.TimeScale, 1)
}

// GatewayArm sums one arm's requests, as the clients saw them through HTTP.
type GatewayArm struct {
	Requests     int `json:"requests"`
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// PrefillTokens are the prompt tokens not cached, plus FillTokens
	// (splice replacements the engine prefilled).
	PrefillTokens int `json:"prefill_tokens"`
	FillTokens    int `json:"fill_tokens"`
	// EditedRequests carried a new clear; Cleared sums applied_edits.
	EditedRequests int `json:"edited_requests"`
	// TTFT is the time to the first streamed byte of each answer,
	// measured by the client through the front door.
	TTFTms        Quantiles `json:"ttft_ms"`
	TTFTTotalMs   float64   `json:"ttft_total_ms"`
	ModelledTTFTs float64   `json:"modelled_ttft_s"`
	ContractOK    bool      `json:"contract_ok"`
	Error         string    `json:"error,omitempty"`
}

// Quantiles of a sample.
type Quantiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Mean float64 `json:"mean"`
}

// GatewayReport is the scenario's result. Arms: prefix-cache (the history
// goes unedited: a prefix cache alone), edits-reprefill (the front door's
// edits, and the cache re-prefills after each, as Anthropic's server
// does), edits-splice (the same edits, spliced by the host's session diff).
type GatewayReport struct {
	Scenario string                `json:"scenario"`
	Params   GatewayParams         `json:"params"`
	Sessions []string              `json:"sessions"`
	Arms     map[string]GatewayArm `json:"arms"`
	// EditCost is each edit arm's prefill beyond the prefix-cache arm's.
	EditCost map[string]int `json:"edit_cost"`
	// Saved is 1 - splice's edit cost / re-prefill's edit cost.
	Saved   float64       `json:"saved"`
	Targets SavingTargets `json:"targets"`
	// Recompute says what the splices recomputed of the tokens they kept:
	// the host's defaults (config.DefaultMaxKL, DefaultRecomputeFirst) need
	// an engine that recomputes, and the reference engine registers none.
	Recompute string `json:"recompute"`
}

// gatewayRecompute is GatewayReport.Recompute.
var gatewayRecompute = fmt.Sprintf("none: the reference engine registers no recompute, so the splice defaults "+
	"(splice.max_kl %g where the engine ranks kept tokens, splice.recompute.first %d through the front door for a "+
	"connector engine) do not apply; make demo measures them on vLLM", config.DefaultMaxKL, config.DefaultRecomputeFirst)

// Arm names.
const (
	ArmPrefixCache    = "prefix-cache"
	ArmEditsReprefill = "edits-reprefill"
	ArmEditsSplice    = "edits-splice"
)

var gatewayArms = []string{ArmPrefixCache, ArmEditsReprefill, ArmEditsSplice}

// RunGateway runs the three arms, each on a fresh host, in one run.
func RunGateway(ctx context.Context, p GatewayParams, prog Progress) (*GatewayReport, error) {
	p.defaults()
	if len(p.Traces) == 0 {
		return nil, fmt.Errorf("gateway: at least one trace is required")
	}
	ids := make([]string, len(p.Traces))
	sessions := make([][]Turn, len(p.Traces))
	longest := 0
	for i, tr := range p.Traces {
		ids[i] = tr.SessionID
		sessions[i] = ChatTurns(tr, SystemBlock("agent", p.SystemTokens), p.MaxRequests)
		if n := len(sessions[i]); n > 0 {
			toks, _ := chatwire.Render(sessions[i][n-1].Messages, policytest.Tokenize)
			longest = max(longest, len(toks))
		}
	}
	p.DevicePages = cmp.Or(p.DevicePages, 2*len(p.Traces)*longest/p.PageSize+512)
	rep := &GatewayReport{Scenario: "gateway", Params: p, Sessions: ids, Arms: map[string]GatewayArm{}, EditCost: map[string]int{},
		Recompute: gatewayRecompute}
	for _, arm := range gatewayArms {
		a, err := gatewayArm(ctx, p, arm, sessions, prog)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", arm, err)
		}
		rep.Arms[arm] = a
	}
	base := rep.Arms[ArmPrefixCache].PrefillTokens
	ok := true
	for _, arm := range gatewayArms {
		rep.EditCost[arm] = rep.Arms[arm].PrefillTokens - base
		ok = ok && rep.Arms[arm].ContractOK
	}
	if re := rep.EditCost[ArmEditsReprefill]; re > 0 {
		rep.Saved = 1 - float64(rep.EditCost[ArmEditsSplice])/float64(re)
	}
	rep.Targets = SavingTargets{SavedMin: 0.8, Met: ok && rep.EditCost[ArmEditsReprefill] > 0 && rep.Saved >= 0.8}
	return rep, nil
}

// gatewayArm starts a host with the front door and the engine's HTTP
// server behind it, and replays every session through it.
func gatewayArm(ctx context.Context, p GatewayParams, arm string, sessions [][]Turn, prog Progress) (GatewayArm, error) {
	a := GatewayArm{ContractOK: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return a, err
	}
	defer ln.Close()
	rules := gateway.Rules{}
	if arm != ArmPrefixCache {
		if rules, err = gateway.PolicyRules([]config.Policy{{Name: "truncation", Builtin: "truncation", Params: p.Policy}}); err != nil {
			return a, err
		}
	}
	o := p.rig()
	o.AutoSplice, o.Options = arm == ArmEditsSplice, []daemon.Option{daemon.WithGatewayRules(rules)}
	o.Adjust = func(c *config.Config) {
		c.Gateway.Listen = "127.0.0.1:0"
		c.Gateway.Upstream = "http://" + ln.Addr().String() + "/v1"
	}
	rig, err := StartRig(ctx, o)
	if err != nil {
		return a, err
	}
	defer rig.Close()
	srv := &http.Server{Handler: refengine.NewServer(rig.Engine, refengine.ServerOptions{TimeScale: p.TimeScale}).Handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + rig.Daemon.GatewayAddr() + "/v1/chat/completions"
	var ttfts []float64
	for si, turns := range sessions {
		prevCleared := 0
		for ti, t := range turns {
			prog.say("gateway %s: session %d/%d request %d/%d", arm, si+1, len(sessions), ti+1, len(turns))
			fills := rig.Fills.Tokens.Load()
			r, err := StreamChat(ctx, url, RefModel, fmt.Sprintf("bench-%d", si), t.Messages)
			if err != nil {
				a.ContractOK, a.Error = false, err.Error()
				return a, nil
			}
			fill := int(rig.Fills.Tokens.Load() - fills)
			a.Requests++
			a.PromptTokens += r.Prompt
			a.CachedTokens += r.Cached
			a.FillTokens += fill
			a.PrefillTokens += r.Prompt - r.Cached + fill
			a.ModelledTTFTs += r.ModelledMs / 1e3
			ttfts = append(ttfts, r.TTFTms)
			a.TTFTTotalMs += r.TTFTms
			if r.Cleared > prevCleared {
				a.EditedRequests++
			}
			prevCleared = r.Cleared
		}
	}
	if n := len(ttfts); n > 0 {
		slices.Sort(ttfts)
		a.TTFTms = Quantiles{P50: ttfts[n/2], P90: ttfts[n*9/10], Mean: a.TTFTTotalMs / float64(n)}
	}
	return a, nil
}

// Charts: prefill and mean TTFT per arm.
func (r *GatewayReport) Charts() []Chart {
	return []Chart{
		{Title: "prefill tokens", Unit: "tokens", Bars: barsOf(gatewayArms, func(n string) float64 { return float64(r.Arms[n].PrefillTokens) })},
		{Title: "TTFT through HTTP, mean", Unit: "ms", Bars: barsOf(gatewayArms, func(n string) float64 { return r.Arms[n].TTFTms.Mean })},
	}
}
