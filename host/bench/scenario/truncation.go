package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/kvpilot/kvpilot/policies/truncation"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	"github.com/kvpilot/kvpilot/sdk/policytest"
)

// EditedSessions are real agent sessions replayed under the truncation
// policy's edits, what the gateway and truncation scenarios take: Policy
// holds the policy's params (default: Leyline's truncate_older_than(n=2,
// max_chars=200)), MaxRequests the requests per session (0: all).
type EditedSessions struct {
	Traces []Trace `json:"-"`
	Shape

	Policy      map[string]any `json:"policy"`
	MaxRequests int            `json:"max_requests"`
}

func (p *EditedSessions) defaults() {
	p.Shape.defaults()
	if p.Policy == nil {
		p.Policy = map[string]any{"older_than": 2, "max_chars": 200}
	}
}

// TruncationParams shape the truncation scenario: the sessions under the
// built-in truncation policy (in process, through its Go API), whose
// harness sends the truncated history.
type TruncationParams struct{ EditedSessions }

// TruncationArm sums an arm: over every request (All) and over the
// requests whose history the policy had just edited (AfterEdit, where
// prefill_tokens counts the splice fills too).
type TruncationArm struct {
	All       ArmStats `json:"all"`
	AfterEdit ArmStats `json:"after_edit"`
	// NewTokens are the edited requests' new turns (tokens past the
	// session's previous sequence), which every arm prefills.
	NewTokens int `json:"new_tokens"`
	// PrefillTokens is what the edits cost: AfterEdit's prefill (fills
	// included) less NewTokens. The target is about this.
	PrefillTokens int `json:"prefill_tokens"`
	// edits and edited are the report's Edits and EditedRequests.
	edits, edited int
}

// TruncationReport is the scenario's result. Arms: reprefill (the
// truncated history goes to a prefix cache: everything after the first
// edit is prefilled again), splice (the policy's splices are applied to
// the cache first, replacements prefilled as fill orders).
type TruncationReport struct {
	Scenario string                   `json:"scenario"`
	Params   TruncationParams         `json:"params"`
	Sessions []string                 `json:"sessions"`
	Arms     map[string]TruncationArm `json:"arms"`
	// Edits counts the policy's splices; EditedRequests the requests that
	// followed them.
	Edits          int `json:"edits"`
	EditedRequests int `json:"edited_requests"`
	// Saved is 1 - splice/reprefill prefill tokens after edits.
	Saved        float64       `json:"saved"`
	ContractOK   bool          `json:"contract_ok"`
	SystemPrefix string        `json:"system_prefix"`
	Targets      SavingTargets `json:"targets"`
}

// SavingTargets: the splice arm saves at least SavedMin of the prefill
// the re-prefill arm spends after edits.
type SavingTargets struct {
	SavedMin float64 `json:"saved_min"`
	Met      bool    `json:"met"`
}

var truncationArms = []string{"reprefill", "splice"}

// RunTruncation runs both arms over every session, each arm on a fresh host.
func RunTruncation(ctx context.Context, p TruncationParams, prog Progress) (*TruncationReport, error) {
	p.defaults()
	if len(p.Traces) == 0 {
		return nil, fmt.Errorf("truncation: at least one trace is required")
	}
	// The device holds the longest session twice over.
	longest := 0
	for _, tr := range p.Traces {
		if rs := Render(tr, RenderOptions{System: SystemBlock("agent", p.SystemTokens), MaxRequests: p.MaxRequests}); len(rs) > 0 {
			longest = max(longest, len(rs[len(rs)-1].Prompt)+len(rs[len(rs)-1].Output))
		}
	}
	p.DevicePages = cmp.Or(p.DevicePages, 3*longest/p.PageSize+256)
	rep := &TruncationReport{Scenario: "truncation", Params: p, SystemPrefix: p.systemPrefix()}
	for _, tr := range p.Traces {
		rep.Sessions = append(rep.Sessions, tr.SessionID)
	}
	var err error
	rep.Arms, err = runArms(ctx, "truncation", truncationArms, func(string) RigOptions { return p.rig() }, func(rig *Rig, arm string) (TruncationArm, error) {
		return truncationArm(ctx, rig, p, arm, prog)
	})
	if err != nil {
		return nil, err
	}
	rep.Edits, rep.EditedRequests = rep.Arms["splice"].edits, rep.Arms["splice"].edited
	rep.ContractOK = rep.Arms["reprefill"].All.ContractOK && rep.Arms["splice"].All.ContractOK
	if re := rep.Arms["reprefill"].PrefillTokens; re > 0 {
		rep.Saved = 1 - float64(rep.Arms["splice"].PrefillTokens)/float64(re)
	}
	rep.Targets = SavingTargets{SavedMin: 0.8, Met: rep.ContractOK && rep.Saved >= 0.8}
	return rep, nil
}

func truncationArm(ctx context.Context, rig *Rig, p TruncationParams, arm string, prog Progress) (TruncationArm, error) {
	a := TruncationArm{All: ArmStats{ContractOK: true}, AfterEdit: ArmStats{ContractOK: true}}
	system := SystemBlock("agent", p.SystemTokens)
	params, err := json.Marshal(p.Policy)
	if err != nil {
		return a, err
	}
	for si, tr := range p.Traces {
		pol := truncation.New()
		if err := pol.Configure(params); err != nil {
			return a, fmt.Errorf("configure truncation: %w", err)
		}
		session := fmt.Sprintf("trunc-%d", si)
		sess := policytest.NewSession(session, false)
		sess.Append(chat.Message{Role: "system", Content: system})
		msgs := tr.Messages
		turn := 0
		var prevLen int64 // the session's sequence after the last output
		for i := 0; i < len(msgs); {
			if msgs[i].Role != "assistant" {
				sess.Append(msgs[i])
				i++
				continue
			}
			if p.MaxRequests > 0 && turn >= p.MaxRequests {
				break
			}
			prog.say("truncation %s: session %d/%d request %d", arm, si+1, len(p.Traces), turn+1)
			ds, err := pol.Observe(ctx, started(session, turn, sess.Tokens(), sess.Messages(), p.PageSize))
			if err != nil {
				return a, fmt.Errorf("truncation policy: %w", err)
			}
			before := sess.Len()
			splices, err := tokenSplices(sess, ds)
			if err != nil {
				return a, err
			}
			newTokens := int(before - prevLen) // the messages since the last output
			fills := rig.Fills.Tokens.Load()
			if arm == "splice" && len(splices) > 0 {
				if _, err := rig.Apply(ctx, truncation.Name, tenant, splices...); err != nil {
					return a, err
				}
				if sp := rig.Daemon.Engine().Splicer(); sp != nil {
					sp.Wait() // the fills land before the request matches
				}
			}
			// The harness sends the truncated history.
			r := Request{Prompt: sess.Tokens(), Messages: sess.Messages()}
			for ; i < len(msgs) && msgs[i].Role == "assistant"; i++ {
				sess.Append(msgs[i])
			}
			r.Output = sess.Tokens()[len(r.Prompt):]
			prevLen = sess.Len()
			st, ok, err := a.All.turn(ctx, rig, session, tenant, r)
			if !ok {
				return a, err
			}
			// What the engine prefilled for the splices' replacements.
			fill := int(rig.Fills.Tokens.Load() - fills)
			if len(splices) > 0 {
				a.edits += len(splices)
				a.edited++
				a.AfterEdit.add(st)
				a.NewTokens += newTokens
				if arm == "splice" {
					a.AfterEdit.FillTokens += fill
					a.AfterEdit.PrefillTokens += fill
					a.AfterEdit.Splices += len(splices)
					a.All.FillTokens += fill
					a.All.PrefillTokens += fill
				}
			}
			turn++
		}
	}
	a.PrefillTokens = a.AfterEdit.PrefillTokens - a.NewTokens
	return a, nil
}

// tokenSplices applies the policy's splices to the harness's model of
// the session (the truncated history it will send) and returns them with
// token replacements, as an engine-side harness sends them (the host
// takes token ids), left to right. The positions name the sequence before
// the edits, as a turn's do.
func tokenSplices(sess *policytest.Session, ds []policy.Directive) ([]directive.Directive, error) {
	var out []directive.Splice
	for _, d := range ds {
		_, inner := policy.Unwrap(d)
		s, ok := inner.(directive.Splice)
		if !ok {
			continue
		}
		if s.Replacement.Text != "" {
			s.Replacement = directive.Replacement{Tokens: policytest.Tokenize(s.Replacement.Text)}
		}
		out = append(out, s)
	}
	// The session is edited from the right, so the positions to the left
	// still hold.
	sort.Slice(out, func(a, b int) bool { return out[a].Start > out[b].Start })
	res := make([]directive.Directive, len(out))
	for i, s := range out {
		if err := sess.Splice(s.Start, s.End, s.Replacement.Tokens); err != nil {
			return nil, fmt.Errorf("truncation splice %d..%d: %w", s.Start, s.End, err)
		}
		res[len(out)-1-i] = s
	}
	return res, nil
}

// Charts: prefill after edits per arm.
func (r *TruncationReport) Charts() []Chart {
	return []Chart{
		{Title: "prefill after edits", Unit: "tokens", Bars: barsOf(truncationArms, func(n string) float64 { return float64(r.Arms[n].PrefillTokens) })},
		{Title: "cache hit, all requests", Unit: "%", Bars: barsOf(truncationArms, func(n string) float64 { return 100 * r.Arms[n].All.HitRate })},
	}
}
