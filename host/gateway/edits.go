package gateway

import (
	"hash/fnv"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// Edit types, as Anthropic names them (the installed anthropic SDK's
// beta context-management types).
const (
	EditClearToolUses = "clear_tool_uses_20250919"
	EditClearThinking = "clear_thinking_20251015"
)

// Rules are the edits one request gets: the request's own
// context_management, or else the host's policies (policyedits.go).
type Rules struct {
	Tools *ToolRule
	Think *ThinkRule
}

// ToolRule clears old tool results (clear_tool_uses_20250919, and the
// truncation policy's rule, which adds an age and a tool list).
type ToolRule struct {
	// TriggerType is "input_tokens" or "tool_uses"; the rule clears
	// nothing new until the context reaches TriggerValue.
	TriggerType  string
	TriggerValue int64
	// Keep is how many of the most recent tool uses stay intact.
	Keep int
	// ClearAtLeast: clear nothing new unless at least this many input
	// tokens go (a cache break has to pay for itself).
	ClearAtLeast int64
	// Exclude tools are never cleared; Only, when set, are the only tools
	// cleared (the truncation policy's tools).
	Exclude, Only map[string]bool
	// ClearInputs also clears the arguments of the cleared tool uses
	// (InputsOf, when set, of these tools only).
	ClearInputs bool
	InputsOf    map[string]bool
	// OlderThan, when >= 0, clears only results with more than so many
	// assistant turns after them (the truncation policy's older_than).
	OlderThan int
	// Replace returns what a cleared result becomes; "" leaves it (a stub
	// that would not be shorter).
	Replace func(content string) string
}

// ThinkRule clears the reasoning of older assistant turns
// (clear_thinking_20251015, and the think-evict policy).
type ThinkRule struct {
	// Keep is how many of the most recent assistant turns keep their
	// reasoning; negative keeps all.
	Keep int
	// Placeholder replaces cleared reasoning ("" removes it).
	Placeholder string
}

// Applied is one entry of context_management.applied_edits: what the
// request's context lost to one edit type (everything cleared in this
// request, the sticky clears of earlier turns included, as a stateless
// server reports it).
type Applied struct {
	Type                 string `json:"type"`
	ClearedToolUses      *int   `json:"cleared_tool_uses,omitempty"`
	ClearedThinkingTurns *int   `json:"cleared_thinking_turns,omitempty"`
	ClearedInputTokens   int    `json:"cleared_input_tokens"`
}

// itemKey names a clearable item by content, not position: a tool result
// (kind 'r') or a tool call's arguments ('i') by its call id and text, a
// message's reasoning ('t') by its text. A resent history finds its
// earlier clears wherever the item now sits; a diverged branch does not
// inherit clears of items it does not hold.
type itemKey struct {
	kind byte
	id   string
	hash uint64
}

func keyOf(kind byte, id, text string) itemKey {
	h := fnv.New64a()
	h.Write([]byte(text))
	return itemKey{kind, id, h.Sum64()}
}

// Sticky is a session's clears: each item's replacement text, decided once.
type Sticky map[itemKey]string

// Outcome is the result of applying rules to a request.
type Outcome struct {
	Messages []chatwire.Message
	Applied  []Applied
	// Next is the session's sticky set after this request: the clears its
	// messages still hold, new ones included (clears of items the request
	// no longer holds are dropped: an old branch's tail).
	Next Sticky
	// New counts the items cleared for the first time.
	New int
	// Fresh is what this request cleared for the first time, by edit type
	// (the sticky clears of earlier turns left out): what the host's
	// metrics count, each clear once.
	Fresh []Applied
}

// Apply edits msgs: first every sticky clear, then the rules' new clears.
// It is deterministic: the same messages, rules and sticky set give the
// same outcome. msgs is not modified.
func Apply(msgs []chatwire.Message, r Rules, st Sticky) Outcome {
	e := newEditor(msgs, st)
	e.applySticky()
	results, resultTokens, thinking, thinkTokens := e.results, e.resultTokens, e.thinking, e.thinkTokens
	if r.Tools != nil {
		e.clearTools(r.Tools)
	}
	if r.Think != nil {
		e.clearThinking(r.Think)
	}
	o := e.outcome(r)
	if n := e.results - results; n > 0 || e.resultTokens > resultTokens {
		o.Fresh = append(o.Fresh, Applied{Type: EditClearToolUses, ClearedToolUses: &n, ClearedInputTokens: e.resultTokens - resultTokens})
	}
	if n := e.thinking - thinking; n > 0 {
		o.Fresh = append(o.Fresh, Applied{Type: EditClearThinking, ClearedThinkingTurns: &n, ClearedInputTokens: e.thinkTokens - thinkTokens})
	}
	return o
}

type editor struct {
	in, out []chatwire.Message
	st      Sticky
	next    Sticky
	newN    int
	// callName maps a tool call id to its function name.
	callName map[string]string
	// cleared results and thinking turns, with the tokens they freed.
	results, resultTokens int
	thinking, thinkTokens int
}

func newEditor(msgs []chatwire.Message, st Sticky) *editor {
	out := make([]chatwire.Message, len(msgs))
	names := map[string]string{}
	for i, m := range msgs {
		out[i] = m
		out[i].ToolCalls = append([]chatwire.ToolCall(nil), m.ToolCalls...)
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Function.Name
		}
	}
	return &editor{in: msgs, out: out, st: st, next: Sticky{}, callName: names}
}

// applySticky re-applies the session's earlier clears.
func (e *editor) applySticky() {
	for i, m := range e.in {
		if m.Role == "tool" {
			if repl, ok := e.st[keyOf('r', m.ToolCallID, string(m.Content))]; ok {
				e.clearResult(i, repl)
			}
		}
		for j, c := range m.ToolCalls {
			if repl, ok := e.st[keyOf('i', c.ID, c.Function.Arguments)]; ok {
				e.clearInput(i, j, repl)
			}
		}
		if m.ReasoningContent != "" {
			if repl, ok := e.st[keyOf('t', "", m.ReasoningContent)]; ok {
				e.clearThink(i, repl)
			}
		}
	}
}

func (e *editor) clearResult(i int, repl string) {
	m := e.in[i]
	k := keyOf('r', m.ToolCallID, string(m.Content))
	if _, done := e.next[k]; done {
		return
	}
	e.next[k] = repl
	e.out[i].Content = chatwire.Content(repl)
	e.results++
	e.resultTokens += max(0, tokens(string(m.Content))-tokens(repl))
}

func (e *editor) clearInput(i, j int, repl string) {
	c := e.in[i].ToolCalls[j]
	k := keyOf('i', c.ID, c.Function.Arguments)
	if _, done := e.next[k]; done {
		return
	}
	e.next[k] = repl
	e.out[i].ToolCalls[j].Function.Arguments = repl
	e.resultTokens += max(0, tokens(c.Function.Arguments)-tokens(repl))
}

func (e *editor) clearThink(i int, repl string) {
	m := e.in[i]
	k := keyOf('t', "", m.ReasoningContent)
	if _, done := e.next[k]; done {
		return
	}
	e.next[k] = repl
	e.out[i].ReasoningContent = repl
	e.thinking++
	e.thinkTokens += max(0, tokens("<think>"+m.ReasoningContent+"</think>")-thinkTokens(repl))
}

func thinkTokens(repl string) int {
	if repl == "" {
		return 0
	}
	return tokens("<think>" + repl + "</think>")
}

func (e *editor) outcome(r Rules) Outcome {
	o := Outcome{Messages: e.out, Next: e.next, New: e.newN}
	if r.Tools != nil || e.results > 0 {
		n := e.results
		o.Applied = append(o.Applied, Applied{Type: EditClearToolUses, ClearedToolUses: &n, ClearedInputTokens: e.resultTokens})
	}
	if r.Think != nil || e.thinking > 0 {
		n := e.thinking
		o.Applied = append(o.Applied, Applied{Type: EditClearThinking, ClearedThinkingTurns: &n, ClearedInputTokens: e.thinkTokens})
	}
	return o
}

// tokens counts text as the reference template's chunk4 tokenizer does
// (one token per 4 bytes); for other engines it is an estimate, used only
// for triggers, clear_at_least and the cleared counts.
func tokens(s string) int { return (len(s) + 3) / 4 }

// inputTokens counts the edited request as the reference template renders it.
func inputTokens(msgs []chatwire.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(tokens("<|im_start|>"+m.Role+"\n") + tokens("<|im_end|>\n"))
		if m.ReasoningContent != "" {
			n += int64(tokens("<think>" + m.ReasoningContent + "</think>"))
		}
		body := string(m.Content)
		if body == "" && len(m.ToolCalls) == 0 {
			body = " "
		}
		n += int64(tokens(body))
		for _, c := range m.ToolCalls {
			n += int64(tokens("<tool_call>" + c.Function.Name + " " + c.Function.Arguments + "</tool_call>"))
		}
	}
	return n
}

func lowerSet(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[strings.ToLower(n)] = true
	}
	return m
}
