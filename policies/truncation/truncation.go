// Package truncation is the built-in truncation policy: stale tool output
// in a session's history is replaced by a short stub with a splice, so the
// model attends to the turns that matter while the cache keeps everything
// after the edit.
//
// It combines two published rules.
//
// Leyline's truncate_older_than(n, max_chars, tools): a tool result with
// more than n assistant turns after it becomes a head/tail stub of about
// max_chars characters, for the listed tools only. Leyline ran it with
// n=2, max_chars=200, tools=bash, which are the defaults here (with every
// tool allowed).
//
// Anthropic's clear_tool_uses: act only once a trigger is reached (input
// tokens or tool uses), keep the last N tool uses intact, clear at least so
// many tokens or nothing (a cache break has to pay for itself), never touch
// excluded tools, and replace cleared results with placeholder text.
//
// Parameters (all optional; the JSON keys of Params):
//
//	older_than      int       truncate tool results with more than this many assistant turns after them (default 2)
//	max_chars       int       length of the head/tail stub in characters (default 200)
//	tools           [string]  only these tools (case-insensitive); empty: all
//	exclude_tools   [string]  never these tools
//	trigger         {type, value}  act only when type "input_tokens" or "tool_uses" reaches value
//	keep            {type: "tool_uses", value}  keep the last value tool results intact (default 0)
//	clear_at_least  {type: "input_tokens", value}  edit only when at least value tokens go (default 0)
//	placeholder     string    replace with this text instead of a head/tail stub
//	clear_tool_inputs bool    also shorten the assistant's tool-call arguments, by the same rules
//	mode            string    "amortize" (default) or "forget"
//
// It emits one Splice per message, over the message's content span, so the
// chat template's markers stay in place; messages the host reports as
// already edited are left alone.
package truncation

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// Name is the built-in's name, as in `kvpilot policy truncation`.
const Name = "truncation"

// Threshold is a clear_tool_uses style {type, value} pair.
type Threshold struct {
	Type  string `json:"type"`
	Value int64  `json:"value"`
}

// Threshold types.
const (
	InputTokens = "input_tokens"
	ToolUses    = "tool_uses"
)

// Params are the policy's parameters; see the package doc.
type Params struct {
	OlderThan       *int       `json:"older_than"`
	MaxChars        int        `json:"max_chars"`
	Tools           []string   `json:"tools"`
	ExcludeTools    []string   `json:"exclude_tools"`
	Trigger         *Threshold `json:"trigger"`
	Keep            *Threshold `json:"keep"`
	ClearAtLeast    *Threshold `json:"clear_at_least"`
	Placeholder     string     `json:"placeholder"`
	ClearToolInputs bool       `json:"clear_tool_inputs"`
	Mode            string     `json:"mode"`
}

// Policy is the truncation policy. The zero value is configured by Configure.
type Policy struct {
	p         Params
	olderThan int
	tools     map[string]bool
	exclude   map[string]bool
	// done remembers, per session, messages already edited, in case the
	// host's Edited flag is missing; lastSeen bounds that memory.
	done     map[string]map[int]bool
	lastSeen map[string]time.Time
}

// New returns an unconfigured policy.
func New() *Policy { return &Policy{} }

func (*Policy) Info() policy.Info {
	return policy.Info{Name: Name, Version: "1.0.0", Subscriptions: []policy.Kind{policy.KindRequestStarted, policy.KindTick}}
}

// Configure validates and installs params.
func (t *Policy) Configure(raw json.RawMessage) error {
	var p Params
	if err := policy.DecodeParams(raw, &p); err != nil {
		return err
	}
	t.olderThan = 2
	if p.OlderThan != nil {
		t.olderThan = *p.OlderThan
	}
	if p.MaxChars == 0 {
		p.MaxChars = 200
	}
	switch {
	case t.olderThan < 0:
		return fmt.Errorf("older_than %d: want >= 0", t.olderThan)
	case p.MaxChars < 0:
		return fmt.Errorf("max_chars %d: want > 0", p.MaxChars)
	case p.Mode != "" && p.Mode != string(directive.ModeAmortize) && p.Mode != string(directive.ModeForget):
		return fmt.Errorf("mode %q: want amortize or forget", p.Mode)
	}
	if p.Mode == "" {
		p.Mode = string(directive.ModeAmortize)
	}
	if err := checkThreshold("trigger", p.Trigger, InputTokens, ToolUses); err != nil {
		return err
	}
	if err := checkThreshold("keep", p.Keep, ToolUses); err != nil {
		return err
	}
	if err := checkThreshold("clear_at_least", p.ClearAtLeast, InputTokens); err != nil {
		return err
	}
	t.p = p
	t.tools = lowerSet(p.Tools)
	t.exclude = lowerSet(p.ExcludeTools)
	t.done = map[string]map[int]bool{}
	t.lastSeen = map[string]time.Time{}
	return nil
}

func checkThreshold(key string, th *Threshold, types ...string) error {
	if th == nil {
		return nil
	}
	ok := false
	for _, ty := range types {
		ok = ok || th.Type == ty
	}
	switch {
	case !ok:
		return fmt.Errorf("%s.type %q: want one of %s", key, th.Type, strings.Join(types, ", "))
	case th.Value < 0:
		return fmt.Errorf("%s.value %d: want >= 0", key, th.Value)
	}
	return nil
}

func lowerSet(ss []string) map[string]bool {
	m := make(map[string]bool, len(ss))
	for _, s := range ss {
		m[strings.ToLower(s)] = true
	}
	return m
}

// sessionIdle is how long a session's memory is kept without requests.
const sessionIdle = 6 * time.Hour

// Observe edits on RequestStarted and forgets idle sessions on Tick.
func (t *Policy) Observe(_ context.Context, obs policy.Observation) ([]policy.Directive, error) {
	switch obs.Kind {
	case policy.KindTick:
		for s, at := range t.lastSeen {
			if obs.Time.Sub(at) > sessionIdle {
				delete(t.lastSeen, s)
				delete(t.done, s)
			}
		}
		return nil, nil
	case policy.KindRequestStarted:
		return t.request(obs), nil
	}
	return nil, nil
}

type candidate struct {
	msg  int
	span chat.Span
	repl string
}

func (t *Policy) request(obs policy.Observation) []policy.Directive {
	r := obs.Started
	key := obs.Tenant + "\x00" + obs.Session
	t.lastSeen[key] = obs.Time
	ms := r.Messages

	results := 0
	for _, m := range ms {
		if m.Role == "tool" {
			results++
		}
	}
	if th := t.p.Trigger; th != nil {
		if (th.Type == InputTokens && r.PromptTokens < th.Value) || (th.Type == ToolUses && int64(results) < th.Value) {
			return nil
		}
	}

	age := chat.TurnAges(ms)
	keep := int64(0)
	if t.p.Keep != nil {
		keep = t.p.Keep.Value
	}
	done := t.done[key]
	var cands []candidate
	var saved int64
	resultsSeen, callsSeen := 0, 0 // counted from the end, for keep
	calls := 0
	for _, m := range ms {
		if isCall(m) {
			calls++
		}
	}
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		var nth int // 1 = newest of its kind
		switch {
		case m.Role == "tool":
			resultsSeen++
			nth = resultsSeen
		case isCall(m) && t.p.ClearToolInputs:
			callsSeen++
			nth = callsSeen
		default:
			continue
		}
		if int64(nth) <= keep || age[i] <= t.olderThan || m.Edited || done[i] || !t.toolAllowed(m.ToolName) {
			continue
		}
		if m.Span.Len() <= 0 {
			continue
		}
		repl := t.replacement(m.Content)
		if repl == "" && t.p.Placeholder == "" {
			continue // the stub would not be shorter
		}
		cands = append(cands, candidate{i, m.Span, repl})
		saved += m.Span.Len() - estimateTokens(repl)
	}
	if len(cands) == 0 {
		return nil
	}
	if th := t.p.ClearAtLeast; th != nil && saved < th.Value {
		return nil
	}
	sort.Slice(cands, func(a, b int) bool { return cands[a].span.Start < cands[b].span.Start })
	if done == nil {
		done = map[int]bool{}
		t.done[key] = done
	}
	out := make([]policy.Directive, 0, len(cands))
	for _, c := range cands {
		done[c.msg] = true
		out = append(out, directive.Splice{
			Session: obs.Session, Start: c.span.Start, End: c.span.End,
			Replacement: directive.Replacement{Text: c.repl}, Mode: directive.Mode(t.p.Mode),
		})
		if len(out) == directive.DefaultMaxDirectives {
			break // the rest wait for the next request
		}
	}
	return out
}

func isCall(m chat.Message) bool { return m.Role == "assistant" && m.ToolName != "" }

func (t *Policy) toolAllowed(name string) bool {
	n := strings.ToLower(name)
	if t.exclude[n] {
		return false
	}
	return len(t.tools) == 0 || t.tools[n]
}

// replacement returns the placeholder, or the head/tail stub of content;
// "" when a stub would not be shorter than the content.
func (t *Policy) replacement(content string) string {
	if t.p.Placeholder != "" {
		return t.p.Placeholder
	}
	return Stub(content, t.p.MaxChars)
}

// Stub keeps about maxChars characters of s, half from its head and half
// from its tail, around a marker that says how much was cut. It returns ""
// when the stub would not be shorter than s.
func Stub(s string, maxChars int) string {
	n := utf8.RuneCountInString(s)
	headN := maxChars / 2
	tailN := maxChars - headN
	cut := n - headN - tailN
	if cut <= 0 {
		return ""
	}
	runes := []rune(s)
	stub := string(runes[:headN]) + fmt.Sprintf("\n[... %d chars truncated ...]\n", cut) + string(runes[n-tailN:])
	if len(stub) >= len(s) {
		return ""
	}
	return stub
}

// estimateTokens guesses a replacement's length in tokens (about four
// bytes a token); only clear_at_least uses it.
func estimateTokens(s string) int64 { return int64(len(s)+3) / 4 }
