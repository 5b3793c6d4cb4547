package scenario

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// ThinkStripParams shape the think-strip scenario: a reasoning session
// (the trace's thinking rendered as <think>…</think> inside its assistant
// turns, as Qwen3- and DeepSeek-style templates do) whose harness strips
// the thinking from the history of every later request.
type ThinkStripParams struct {
	Trace Trace `json:"-"`

	MaxRequests     int    `json:"max_requests"`
	MaxMessageChars int    `json:"max_message_chars"`
	SystemTokens    int    `json:"system_tokens"`
	PageSize        int    `json:"page_size"`
	Model           string `json:"model"`
	// DevicePages 0 sizes the device to hold the session without eviction.
	DevicePages int                 `json:"device_pages"`
	Cost        refengine.CostModel `json:"cost"`
}

func (p *ThinkStripParams) defaults() {
	if p.MaxRequests == 0 {
		p.MaxRequests = 80
	}
	if p.MaxMessageChars == 0 {
		p.MaxMessageChars = 3000
	}
	if p.SystemTokens == 0 {
		p.SystemTokens = 4000
	}
	if p.PageSize == 0 {
		p.PageSize = 16
	}
	if p.Model == "" {
		p.Model = "gqa"
	}
	if p.Cost == (refengine.CostModel{}) {
		p.Cost = refengine.DefaultCost
	}
}

// ThinkStripReport is the scenario's result over every request of the
// session. Arms: keep (history keeps its thinking: prefix-stable),
// strip-reprefill (stripped history on a prefix cache: everything after
// the first stripped <think> is prefilled again), strip-splice (the
// harness declares each strip as a Splice with an empty replacement, so
// the answer after the thinking stays cached, moved by Δ).
type ThinkStripReport struct {
	Scenario string              `json:"scenario"`
	Params   ThinkStripParams    `json:"params"`
	Arms     map[string]ArmStats `json:"arms"`
	// ThinkingTokens are the rendered thinking tokens the session
	// produced; StrippedSpans how many think spans the strip arms removed.
	ThinkingTokens int  `json:"thinking_tokens"`
	StrippedSpans  int  `json:"stripped_spans"`
	ContractOK     bool `json:"contract_ok"`
	// ReusedTokens is what strip-splice kept cached that strip-reprefill
	// prefilled again.
	ReusedTokens int    `json:"reused_tokens"`
	SystemPrefix string `json:"system_prefix"`
}

var thinkStripArms = []string{"keep", "strip-reprefill", "strip-splice"}

// thinkRequest is a request with the thinking spans of its output, in
// positions of prompt+output.
type thinkRequest struct {
	Request
	think []directive.Splice
}

// renderThinking renders tr with its thinking; with strip, each request's
// history has the thinking of earlier outputs removed (the harness strips
// it), and the spans it removed are returned with the request that
// produced them.
func renderThinking(tr Trace, o RenderOptions, strip bool) ([]thinkRequest, int) {
	sess := policytest.NewSession(tr.SessionID, true)
	if o.System != "" {
		sess.Append(Message{Role: "system", Content: o.System})
	}
	var out []thinkRequest
	thinking := 0
	msgs := tr.Messages
	for i := 0; i < len(msgs); {
		if msgs[i].Role != "assistant" {
			sess.Append(cut(msgs[i], o.MaxMessageChars))
			i++
			continue
		}
		if o.MaxRequests > 0 && len(out) >= o.MaxRequests {
			break
		}
		prompt := sess.Tokens()
		r := thinkRequest{Request: Request{Prompt: prompt, Messages: sess.Messages()}}
		first := len(r.Messages)
		for ; i < len(msgs) && msgs[i].Role == "assistant"; i++ {
			sess.Append(cut(msgs[i], o.MaxMessageChars))
		}
		r.Output = sess.Tokens()[len(prompt):]
		for _, m := range sess.Messages()[first:] {
			for _, t := range m.Thinking {
				thinking += int(t.Len())
				r.think = append(r.think, directive.Splice{Session: tr.SessionID, Start: t.Start, End: t.End, Mode: directive.ModeAmortize})
			}
		}
		if strip {
			spans := append([]directive.Splice(nil), r.think...)
			sort.Slice(spans, func(a, b int) bool { return spans[a].Start > spans[b].Start })
			for _, s := range spans {
				if err := sess.Splice(s.Start, s.End, nil); err != nil {
					panic(fmt.Sprintf("think-strip: strip %d..%d: %v", s.Start, s.End, err)) // spans come from the session itself
				}
			}
		}
		out = append(out, r)
	}
	return out, thinking
}

// RunThinkStrip runs the three arms, each on a fresh host.
func RunThinkStrip(ctx context.Context, p ThinkStripParams, prog Progress) (*ThinkStripReport, error) {
	p.defaults()
	o := RenderOptions{System: SystemBlock("reasoning", p.SystemTokens), MaxMessageChars: p.MaxMessageChars, MaxRequests: p.MaxRequests}
	keep, thinking := renderThinking(p.Trace, o, false)
	strip, _ := renderThinking(p.Trace, o, true)
	if thinking == 0 {
		return nil, fmt.Errorf("think-strip: trace %s has no thinking in its first %d requests", p.Trace.SessionID, p.MaxRequests)
	}
	if p.DevicePages == 0 && len(keep) > 0 {
		last := keep[len(keep)-1]
		p.DevicePages = 3*(len(last.Prompt)+len(last.Output))/p.PageSize + 256
	}
	rep := &ThinkStripReport{Scenario: "think-strip", Params: p, Arms: map[string]ArmStats{}, ThinkingTokens: thinking, ContractOK: true,
		SystemPrefix: fmt.Sprintf("deterministic %d-token system block", p.SystemTokens)}
	for _, arm := range thinkStripArms {
		reqs := strip
		if arm == "keep" {
			reqs = keep
		}
		a, n, err := thinkStripArm(ctx, p, arm, reqs, prog)
		if err != nil {
			return nil, fmt.Errorf("think-strip %s: %w", arm, err)
		}
		if arm == "strip-splice" {
			rep.StrippedSpans = n
		}
		rep.Arms[arm] = a
		rep.ContractOK = rep.ContractOK && a.ContractOK
	}
	rep.ReusedTokens = rep.Arms["strip-splice"].CachedTokens - rep.Arms["strip-reprefill"].CachedTokens
	return rep, nil
}

func thinkStripArm(ctx context.Context, p ThinkStripParams, arm string, reqs []thinkRequest, prog Progress) (ArmStats, int, error) {
	a := ArmStats{ContractOK: true}
	rig, err := StartRig(ctx, RigOptions{PageSize: p.PageSize, DevicePages: p.DevicePages, HostPages: p.DevicePages, Model: p.Model, Cost: p.Cost})
	if err != nil {
		return a, 0, err
	}
	defer rig.Close()
	const tenant = "bench"
	session := "reasoning"
	spliced := 0
	for i, r := range reqs {
		prog.say("think-strip %s: request %d/%d", arm, i+1, len(reqs))
		if arm == "strip-splice" && i > 0 {
			// The harness stripped the previous output's thinking from the
			// history it sends; it declares the same edit to the host.
			prev := reqs[i-1]
			cached := (len(prev.Prompt) + len(prev.Output)) / p.PageSize * p.PageSize
			var ds []directive.Directive
			for _, s := range prev.think {
				if s.End <= int64(cached) {
					s.Session = session
					ds = append(ds, s)
				}
			}
			if len(ds) > 0 {
				if _, err := rig.Apply(ctx, "harness", tenant, ds...); err != nil {
					return a, spliced, err
				}
				spliced += len(ds)
				a.Splices++
			}
		}
		st, err := runTurn(ctx, rig.Engine, nil, refengine.TurnRequest{Session: session, Tenant: tenant, Tokens: r.Prompt, Output: r.Output, Messages: r.EngineMessages()})
		if err != nil {
			return a, spliced, a.fail(err)
		}
		a.add(st)
	}
	a.finish()
	return a, spliced, nil
}

// WriteTable prints the arms.
func (r *ThinkStripReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := r.Params
	fmt.Fprintf(tw, "think-strip: trace %s, %d requests, thinking rendered as <think>…</think> (%d tokens); %s\n\n",
		p.Trace.SessionID, r.Arms["keep"].Requests, r.ThinkingTokens, r.SystemPrefix)
	fmt.Fprintf(tw, "arm\tcached/prompt\thit\tprefill tokens\tTTFT ms (sum)\tsplices\trotated rows\tcontract\n")
	for _, name := range thinkStripArms {
		a := r.Arms[name]
		fmt.Fprintf(tw, "%s\t%d/%d\t%.1f%%\t%d\t%.0f\t%d\t%d\t%s\n", name, a.CachedTokens, a.PromptTokens, 100*a.HitRate, a.PrefillTokens, a.TTFTms, a.Splices, a.RotatedRows, okWord(a.ContractOK))
	}
	fmt.Fprintf(tw, "\nstrip-splice kept %d tokens cached that strip-reprefill prefilled again (%d think spans spliced out). SGLang strip-thinking anchor: 11.1%% -> 17.1%% hit\n",
		r.ReusedTokens, r.StrippedSpans)
	return tw.Flush()
}

// Charts: hit rate and prefill per arm.
func (r *ThinkStripReport) Charts() []Chart {
	var hit, pre []Bar
	for _, name := range thinkStripArms {
		a := r.Arms[name]
		hit = append(hit, Bar{name, 100 * a.HitRate})
		pre = append(pre, Bar{name, float64(a.PrefillTokens)})
	}
	return []Chart{{Title: "cache hit", Unit: "%", Bars: hit}, {Title: "prefill", Unit: "tokens", Bars: pre}}
}
