package scenario

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// SpliceReplayParams shape the splice-replay scenario, a published
// three-phase message-edit microbenchmark: a session of Turns user turns
// (topic words slotted into a fixed template family, four themes) behind a
// long system block, each answered by AnswerChars characters of a real
// agent trace; then the conversation up to EditTurn re-issued with that
// turn's topic word swapped for a same-template synonym; then the whole
// edited conversation replayed as one request.
type SpliceReplayParams struct {
	Answers Trace `json:"-"`
	Shape

	Turns       int `json:"turns"`
	EditTurn    int `json:"edit_turn"`
	AnswerChars int `json:"answer_chars"`
}

func (p *SpliceReplayParams) defaults() {
	p.Shape.defaults()
	p.Turns = cmp.Or(p.Turns, 6)
	p.AnswerChars = cmp.Or(p.AnswerChars, 8000)
}

// leylineThemes are the benchmark's four themes: a template and its topic word,
// with the synonym the edit swaps in. The original swapped "risotto" for
// "paella"; here the swaps change the turn's length in tokens, so the
// turns after the edit move (Δ ≠ 0) and their keys are rotated.
var leylineThemes = []struct{ template, word, synonym string }{
	{"How do I get the consistency of %s right when I'm a beginner?", "risotto", "saffron paella"},
	{"What is the idiomatic way to use a %s when the program is under load?", "goroutine", "worker pool"},
	{"Why did %s matter so much to the trade routes of its time?", "Byzantium", "Venice"},
	{"Can you explain how %s works, step by step, for a student?", "photosynthesis", "respiration"},
}

// SpliceReplayReport is the scenario's result: the replay request's hit
// rate and prefill per arm (the build and edit phases are the same in
// every arm but cache-off), and whether the contract held everywhere.
type SpliceReplayReport struct {
	Scenario     string              `json:"scenario"`
	Params       SpliceReplayParams  `json:"params"`
	Arms         map[string]ArmStats `json:"arms"`
	Phases       map[string]ArmStats `json:"phases"`
	ContractOK   bool                `json:"contract_ok"`
	Edit         string              `json:"edit"`
	SystemPrefix string              `json:"system_prefix"`
	Targets      SpliceTargets       `json:"targets"`
}

// SpliceTargets: splice >= 95% replay hit, radix lower, contract held (the
// published reference on this benchmark: radix 49.6%, splice 60.8%).
type SpliceTargets struct {
	SpliceHitMin float64 `json:"splice_hit_min"`
	Met          bool    `json:"met"`
}

var spliceReplayArms = []string{"cache-off", "radix", "splice"}

type leylineConversation struct {
	build  []Request
	edit   Request
	replay Request
	edited string
}

// leylineSession renders the three phases' requests.
func leylineSession(p SpliceReplayParams) (leylineConversation, error) {
	var text strings.Builder
	for _, m := range p.Answers.Messages {
		if m.Role != "user" && m.Content != "" {
			text.WriteString(m.Content)
			text.WriteString("\n")
		}
	}
	body := text.String()
	if len(body) < p.AnswerChars*p.Turns {
		return leylineConversation{}, fmt.Errorf("trace %s has %d characters of answers, need %d", p.Answers.SessionID, len(body), p.AnswerChars*p.Turns)
	}
	// render is the requests of the conversation's first turns turns, the
	// edit made or not.
	system := SystemBlock("leyline", p.SystemTokens)
	render := func(turns int, edited bool) []Request {
		tr := Trace{SessionID: "leyline"}
		for t := range turns {
			th := leylineThemes[t%len(leylineThemes)]
			w := th.word
			if edited && t == p.EditTurn {
				w = th.synonym
			}
			tr.Messages = append(tr.Messages, chat.Message{Role: "user", Content: fmt.Sprintf(th.template, w)},
				chat.Message{Role: "assistant", Content: body[t*p.AnswerChars : (t+1)*p.AnswerChars]})
		}
		return Render(tr, RenderOptions{System: system})
	}
	ed, rp := render(p.EditTurn+1, true), render(p.Turns, true)
	th := leylineThemes[p.EditTurn%len(leylineThemes)]
	return leylineConversation{build: render(p.Turns, false), edit: ed[len(ed)-1], replay: rp[len(rp)-1],
		edited: fmt.Sprintf("turn %d: %q -> %q", p.EditTurn+1, th.word, th.synonym)}, nil
}

// RunSpliceReplay runs the three arms, each on a fresh host.
func RunSpliceReplay(ctx context.Context, p SpliceReplayParams, prog Progress) (*SpliceReplayReport, error) {
	p.defaults()
	if p.EditTurn < 0 || p.EditTurn >= p.Turns-1 {
		return nil, fmt.Errorf("splice-replay: edit turn %d: want 0..%d (a turn before the last)", p.EditTurn, p.Turns-2)
	}
	c, err := leylineSession(p)
	if err != nil {
		return nil, fmt.Errorf("splice-replay: %w", err)
	}
	// The device holds every phase without eviction.
	p.DevicePages = cmp.Or(p.DevicePages, 4*(len(c.replay.Prompt)+len(c.replay.Output))/p.PageSize+256)
	rep := &SpliceReplayReport{Scenario: "splice-replay", Params: p, Phases: map[string]ArmStats{}, Edit: c.edited, SystemPrefix: p.systemPrefix()}
	o := func(arm string) RigOptions {
		o := p.rig()
		o.AutoSplice = arm == "splice"
		return o
	}
	arms, err := runArms(ctx, "splice-replay", spliceReplayArms, o, func(rig *Rig, arm string) (ArmStats, error) {
		build, replay, err := spliceReplayArm(ctx, rig, arm, c, prog)
		rep.Phases[arm+"/build+edit"] = build
		return replay, err
	})
	if err != nil {
		return nil, err
	}
	rep.Arms, rep.ContractOK = arms, allContractOK(arms) && allContractOK(rep.Phases)
	s, r := arms["splice"], arms["radix"]
	rep.Targets = SpliceTargets{SpliceHitMin: 0.95, Met: rep.ContractOK && s.HitRate >= 0.95 && r.HitRate < s.HitRate}
	return rep, nil
}

func spliceReplayArm(ctx context.Context, rig *Rig, arm string, c leylineConversation, prog Progress) (build, replay ArmStats, err error) {
	build.ContractOK, replay.ContractOK = true, true
	n := 0
	// cache-off: every request under its own tenant, so nothing is shared.
	tenantOf := func() string {
		n++
		if arm == "cache-off" {
			return fmt.Sprintf("off-%d", n)
		}
		return tenant
	}
	for i, r := range c.build {
		prog.say("splice-replay %s: build turn %d/%d", arm, i+1, len(c.build))
		if _, ok, err := build.turn(ctx, rig, "leyline", tenantOf(), r); !ok {
			return build, replay, err
		}
	}
	prog.say("splice-replay %s: edit", arm)
	if _, ok, err := build.turn(ctx, rig, "leyline-edit", tenantOf(), c.edit); !ok {
		return build, replay, err
	}
	prog.say("splice-replay %s: replay", arm)
	splices, fills := rig.Daemon.Engine().Stats().AutoSplices, rig.Fills.Tokens.Load()
	if _, ok, err := replay.turn(ctx, rig, "leyline", tenantOf(), c.replay); !ok {
		return build, replay, err
	}
	replay.Splices = int(rig.Daemon.Engine().Stats().AutoSplices - splices)
	// The fills prefilled the splice's replacements: that is prefill too.
	replay.FillTokens = int(rig.Fills.Tokens.Load() - fills)
	replay.PrefillTokens += replay.FillTokens
	return build, replay, nil
}

// Charts: replay hit rate and prefill per arm.
func (r *SpliceReplayReport) Charts() []Chart {
	return hitAndPrefill("replay ", spliceReplayArms, r.Arms)
}
