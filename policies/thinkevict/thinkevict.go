// Package thinkevict is the built-in think-span eviction policy:
// reasoning from older turns is spliced out of a
// session's cache, and reasoning just generated is marked transient so it is
// never backed up to a colder tier.
//
// Chat templates of reasoning models (Qwen3, DeepSeek-R1) drop earlier
// turns' <think> blocks from the prompt; an exact-prefix cache then
// re-prefills everything after the first stripped block. Splicing the
// blocks out in amortize mode keeps the answers after them reusable.
//
// It finds reasoning in the spans the host reports (Message.Thinking: an
// inline <think>…</think> block or a rendered thinking field) and, when the
// host reported none, in a message whose whole content is one
// <think>…</think> block.
//
// Parameters (all optional):
//
//	keep         int     keep the reasoning of the last keep assistant turns (default 1)
//	placeholder  string  text put in place of each block (default: nothing)
//	mode         string  "amortize" (default) or "forget"
//	transient    bool    mark finished requests' reasoning pages transient (default true)
package thinkevict

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// Name is the built-in's name.
const Name = "think-evict"

// Params are the policy's parameters; see the package doc.
type Params struct {
	Keep        *int   `json:"keep"`
	Placeholder string `json:"placeholder"`
	Mode        string `json:"mode"`
	Transient   *bool  `json:"transient"`
}

// Policy is the think-evict policy.
type Policy struct {
	keep        int
	placeholder string
	mode        directive.Mode
	transient   bool
	done        map[string]map[int]bool // session -> messages already spliced
	lastSeen    map[string]time.Time
}

// New returns an unconfigured policy.
func New() *Policy { return &Policy{} }

func (*Policy) Info() policy.Info {
	return policy.Info{Name: Name, Version: "1.0.0", Subscriptions: []policy.Kind{
		policy.KindRequestStarted, policy.KindRequestFinished, policy.KindTick}}
}

// Configure validates and installs params.
func (p *Policy) Configure(raw json.RawMessage) error {
	var ps Params
	if err := policy.DecodeParams(raw, &ps); err != nil {
		return err
	}
	p.keep, p.transient = 1, true
	if ps.Keep != nil {
		p.keep = *ps.Keep
	}
	if ps.Transient != nil {
		p.transient = *ps.Transient
	}
	switch ps.Mode {
	case "":
		ps.Mode = string(directive.ModeAmortize)
	case string(directive.ModeAmortize), string(directive.ModeForget):
	default:
		return fmt.Errorf("mode %q: want amortize or forget", ps.Mode)
	}
	if p.keep < 0 {
		return fmt.Errorf("keep %d: want >= 0", p.keep)
	}
	p.placeholder, p.mode = ps.Placeholder, directive.Mode(ps.Mode)
	p.done = map[string]map[int]bool{}
	p.lastSeen = map[string]time.Time{}
	return nil
}

const sessionIdle = 6 * time.Hour

// Observe splices on RequestStarted, marks on RequestFinished, and forgets
// idle sessions on Tick.
func (p *Policy) Observe(_ context.Context, obs policy.Observation) ([]policy.Directive, error) {
	switch obs.Kind {
	case policy.KindRequestStarted:
		return p.request(obs), nil
	case policy.KindRequestFinished:
		if p.transient && len(obs.Finished.ReasoningBlocks) > 0 {
			hs := make([]directive.Hash, len(obs.Finished.ReasoningBlocks))
			for i, h := range obs.Finished.ReasoningBlocks {
				hs[i] = directive.Hash(h)
			}
			return []policy.Directive{directive.Think{BlockHashes: hs, Transient: true}}, nil
		}
	case policy.KindTick:
		for s, at := range p.lastSeen {
			if obs.Time.Sub(at) > sessionIdle {
				delete(p.lastSeen, s)
				delete(p.done, s)
			}
		}
	}
	return nil, nil
}

func (p *Policy) request(obs policy.Observation) []policy.Directive {
	key := obs.Tenant + "\x00" + obs.Session
	p.lastSeen[key] = obs.Time
	ms := obs.Started.Messages

	spans := make([][]chat.Span, len(ms))
	for i, m := range ms {
		if m.Role != "assistant" {
			continue
		}
		spans[i] = m.Thinking
		if len(spans[i]) == 0 && wholeThink(m.Content) && m.Span.Len() > 0 {
			spans[i] = []chat.Span{m.Span}
		}
	}
	// Walk back over assistant turns (runs of assistant messages) that
	// hold reasoning; the newest keep of them stay.
	turns := 0
	type edit struct {
		msg  int
		span chat.Span
	}
	var edits []edit
	done := p.done[key]
	for i := len(ms) - 1; i >= 0; {
		if ms[i].Role != "assistant" {
			i--
			continue
		}
		j := i
		has := false
		for j >= 0 && ms[j].Role == "assistant" {
			has = has || len(spans[j]) > 0
			j--
		}
		if has {
			turns++
		}
		if has && turns > p.keep {
			for k := j + 1; k <= i; k++ {
				if ms[k].Edited || done[k] {
					continue
				}
				for _, s := range spans[k] {
					if s.Len() > 0 {
						edits = append(edits, edit{k, s})
					}
				}
			}
		}
		i = j
	}
	// Edits were gathered newest first; the executor wants them left to
	// right. A turn holds at most DefaultMaxDirectives; the oldest wait
	// for the next request. A message is done only once all its spans go.
	if len(edits) > directive.DefaultMaxDirectives {
		edits = edits[:directive.DefaultMaxDirectives]
		last := edits[len(edits)-1].msg
		for len(edits) > 0 && edits[len(edits)-1].msg == last {
			edits = edits[:len(edits)-1]
		}
	}
	if len(edits) == 0 {
		return nil
	}
	if done == nil {
		done = map[int]bool{}
		p.done[key] = done
	}
	out := make([]policy.Directive, 0, len(edits))
	for a := len(edits) - 1; a >= 0; a-- {
		e := edits[a]
		done[e.msg] = true
		out = append(out, directive.Splice{Session: obs.Session, Start: e.span.Start, End: e.span.End,
			Replacement: directive.Replacement{Text: p.placeholder}, Mode: p.mode})
	}
	return out
}

// wholeThink reports whether s is one <think>…</think> block and nothing
// else (whitespace aside).
func wholeThink(s string) bool {
	s = strings.TrimSpace(s)
	sp := policy.FindThinkSpans(s)
	return len(sp) == 1 && sp[0][0] == 0 && sp[0][1] == len(s)
}
