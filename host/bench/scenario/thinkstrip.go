package scenario

import (
	"cmp"
	"context"
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// ThinkStripParams shape the think-strip scenario: a reasoning session
// (the trace's thinking rendered as <think>…</think> inside its assistant
// turns, as Qwen3- and DeepSeek-style templates do) whose harness strips
// the thinking from the history of every later request.
type ThinkStripParams struct {
	Trace Trace `json:"-"`
	Shape

	MaxRequests     int `json:"max_requests"`
	MaxMessageChars int `json:"max_message_chars"`
}

func (p *ThinkStripParams) defaults() {
	p.Shape.defaults()
	p.MaxRequests = cmp.Or(p.MaxRequests, 80)
	p.MaxMessageChars = cmp.Or(p.MaxMessageChars, 3000)
}

// ThinkStripReport is the scenario's result over every request of the
// session. Arms: keep (history keeps its thinking: prefix-stable),
// strip-reprefill (stripped history on a prefix cache: everything after
// the first stripped <think> is prefilled again), strip-splice (the
// harness declares each strip as a Splice with an empty replacement, so
// the answer after the thinking stays cached, moved by Δ). SGLang's
// strip-thinking anchor to compare with: 11.1% -> 17.1% hit.
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

// RunThinkStrip runs the three arms, each on a fresh host.
func RunThinkStrip(ctx context.Context, p ThinkStripParams, prog Progress) (*ThinkStripReport, error) {
	p.defaults()
	o := RenderOptions{System: SystemBlock("reasoning", p.SystemTokens), Thinking: true, MaxMessageChars: p.MaxMessageChars, MaxRequests: p.MaxRequests}
	keep := Render(p.Trace, o)
	o.StripThinking = true
	strip := Render(p.Trace, o)
	thinking := 0
	for _, r := range keep {
		for _, t := range r.Thinking {
			thinking += int(t.Len())
		}
	}
	if thinking == 0 {
		return nil, fmt.Errorf("think-strip: trace %s has no thinking in its first %d requests", p.Trace.SessionID, p.MaxRequests)
	}
	// The device holds the session without eviction.
	last := keep[len(keep)-1]
	p.DevicePages = cmp.Or(p.DevicePages, 3*(len(last.Prompt)+len(last.Output))/p.PageSize+256)
	rep := &ThinkStripReport{Scenario: "think-strip", Params: p, ThinkingTokens: thinking, SystemPrefix: p.systemPrefix()}
	arms, err := runArms(ctx, "think-strip", thinkStripArms, func(string) RigOptions { return p.rig() }, func(rig *Rig, arm string) (ArmStats, error) {
		reqs := strip
		if arm == "keep" {
			reqs = keep
		}
		a, spliced, err := thinkStripArm(ctx, rig, p, arm, reqs, prog)
		rep.StrippedSpans += spliced // only strip-splice splices
		return a, err
	})
	if err != nil {
		return nil, err
	}
	rep.Arms, rep.ContractOK = arms, allContractOK(arms)
	rep.ReusedTokens = arms["strip-splice"].CachedTokens - arms["strip-reprefill"].CachedTokens
	return rep, nil
}

func thinkStripArm(ctx context.Context, rig *Rig, p ThinkStripParams, arm string, reqs []Request, prog Progress) (ArmStats, int, error) {
	a := ArmStats{ContractOK: true}
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
			for _, t := range prev.Thinking {
				if t.End <= int64(cached) {
					ds = append(ds, directive.Splice{Session: session, Start: t.Start, End: t.End, Mode: directive.ModeAmortize})
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
		if _, ok, err := a.turn(ctx, rig, session, tenant, r); !ok {
			return a, spliced, err
		}
	}
	return a, spliced, nil
}

// Charts: hit rate and prefill per arm.
func (r *ThinkStripReport) Charts() []Chart { return hitAndPrefill("", thinkStripArms, r.Arms) }
