package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// GatewayParams shape the gateway scenario: real agent sessions resent in
// full, as a harness sends them, through the front door (OpenAI chat
// completions, streaming) to the reference engine's HTTP server. Policy is
// the truncation policy's params, the edits the front door applies.
type GatewayParams struct {
	Traces []Trace `json:"-"`
	Shape

	Policy      map[string]any `json:"policy"`
	MaxRequests int            `json:"max_requests"`
	// TimeScale makes the engine wait its modelled TTFT times this before
	// answering, so the TTFT measured through HTTP carries the prefill.
	TimeScale float64 `json:"time_scale"`
}

func (p *GatewayParams) defaults() {
	p.Shape.defaults()
	if p.Policy == nil {
		p.Policy = truncationDefaults
	}
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

func quantiles(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Quantiles{P50: s[len(s)/2], P90: s[len(s)*9/10], Mean: sum / float64(len(s))}
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
}

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
	rep := &GatewayReport{Scenario: "gateway", Params: p, Arms: map[string]GatewayArm{}, EditCost: map[string]int{}}
	for _, tr := range p.Traces {
		rep.Sessions = append(rep.Sessions, tr.SessionID)
	}
	for _, arm := range gatewayArms {
		a, err := gatewayArm(ctx, p, arm, prog)
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
func gatewayArm(ctx context.Context, p GatewayParams, arm string, prog Progress) (GatewayArm, error) {
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
	longest := 0
	sessions := make([][]Turn, len(p.Traces))
	system := SystemBlock("agent", p.SystemTokens)
	for i, tr := range p.Traces {
		sessions[i] = ChatTurns(tr, system, p.MaxRequests)
		if n := len(sessions[i]); n > 0 {
			toks, _ := chatwire.Render(sessions[i][n-1].Messages, Tokenize)
			longest = max(longest, len(toks))
		}
	}
	pages := 2*len(p.Traces)*longest/p.PageSize + 512
	rig, err := StartRig(ctx, RigOptions{PageSize: p.PageSize, DevicePages: pages, HostPages: pages, Cost: p.Cost,
		AutoSplice: arm == ArmEditsSplice, Options: []daemon.Option{daemon.WithGatewayRules(rules)},
		Adjust: func(c *config.Config) {
			c.Gateway.Listen = "127.0.0.1:0"
			c.Gateway.Upstream = "http://" + ln.Addr().String() + "/v1"
		}})
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
			r, err := StreamChat(ctx, url, fmt.Sprintf("bench-%d", si), t.Messages)
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
	a.TTFTms = quantiles(ttfts)
	return a, nil
}

// Turn is one request of a chat session: the full history a harness sends.
type Turn struct{ Messages []chat.Message }

// ChatTurns renders a trace as a harness's chat requests: each run of
// assistant messages is one request's answer, one assistant message (its
// texts and thinking joined, thinking as reasoning_content, its tool uses
// as tool calls with ids), and every request resends the whole history
// before it. Tool results answer the answer's calls in order, as chat
// APIs require: a result the trace holds no call for (an agent whose
// action is in its text) gets a call of its own in the answer, a call the
// trace holds no result for is left out, and a result after no answer at
// all is a user message.
func ChatTurns(tr Trace, system string, maxRequests int) []Turn {
	hist := []chat.Message{{Role: "system", Content: system}}
	var out []Turn
	answer := -1   // hist's index of the current answer, while its results follow it
	var open []int // indices into hist[answer].ToolCalls not yet answered, oldest first
	endResults := func() {
		if answer < 0 {
			return
		}
		a := &hist[answer]
		kept := a.ToolCalls[:0:0]
		for j, c := range a.ToolCalls {
			if !slices.Contains(open, j) {
				kept = append(kept, c)
			}
		}
		a.ToolCalls, answer, open = kept, -1, nil
	}
	for i, m := range tr.Messages {
		switch m.Role {
		case "assistant":
			if i == 0 || tr.Messages[i-1].Role != "assistant" {
				endResults()
				if maxRequests > 0 && len(out) >= maxRequests {
					return out
				}
				out = append(out, Turn{Messages: append([]chat.Message(nil), hist...)})
				hist = append(hist, chat.Message{Role: "assistant"})
				answer = len(hist) - 1
			}
			a := &hist[answer]
			a.ThinkingText = joined(a.ThinkingText, m.ThinkingText)
			if m.ToolName == "" {
				a.Content = joined(a.Content, m.Content)
				continue
			}
			args, _ := json.Marshal(map[string]string{"input": m.Content})
			open = append(open, len(a.ToolCalls))
			a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function",
				Function: chat.FunctionCall{Name: m.ToolName, Arguments: string(args)}})
		case "tool":
			if answer < 0 {
				hist = append(hist, chat.Message{Role: "user", Content: m.Content})
				continue
			}
			a := &hist[answer]
			if len(open) == 0 { // a result of an action the answer's text took
				name := m.ToolName
				if name == "" {
					name = "tool"
				}
				open = append(open, len(a.ToolCalls))
				a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function",
					Function: chat.FunctionCall{Name: name, Arguments: "{}"}})
			}
			c := a.ToolCalls[open[0]]
			open = open[1:]
			hist = append(hist, chat.Message{Role: "tool", ToolCallID: c.ID, ToolName: c.Function.Name, Content: m.Content})
		default:
			endResults()
			role := m.Role
			if role != "user" && role != "system" {
				role = "user"
			}
			hist = append(hist, chat.Message{Role: role, Content: m.Content, ThinkingText: m.ThinkingText})
		}
	}
	return out
}

// joined appends b to a on a new line.
func joined(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

// ChatResult is one streamed answer as the client saw it: the prompt and
// cached tokens of its usage, the tool uses its applied_edits report
// cleared, the time to its first chunk, the engine's modelled TTFT (the
// reference engine's) and the answer's text.
type ChatResult struct {
	Prompt, Cached, Cleared int
	TTFTms, ModelledMs      float64
	Text                    string
}

// RefModel is the model name the reference engine serves.
const RefModel = "ref-gqa"

// StreamChat sends one streaming chat completions request to the
// reference engine's model through the front door at url, in session, and
// reads it to the end.
func StreamChat(ctx context.Context, url, session string, msgs []chat.Message) (ChatResult, error) {
	return StreamChatModel(ctx, url, RefModel, session, msgs)
}

// StreamChatModel is StreamChat to the named model: 16 tokens, greedy.
func StreamChatModel(ctx context.Context, url, model, session string, msgs []chat.Message) (ChatResult, error) {
	var res ChatResult
	body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "max_tokens": 16, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytesReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.SessionHeader, session)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return res, fmt.Errorf("front door answered %d: %s", resp.StatusCode, b)
	}
	return readChatStream(resp.Body, start)
}
