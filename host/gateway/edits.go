package gateway

import (
	"hash/fnv"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
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
	// StickyClears (gateway.sticky_clears, off by default) trades the
	// documented rule for fewer cache breaks: a clear, once made, stays on
	// later turns of the session, and new clears fire only when the prompt
	// as already edited reaches the trigger. The newest Keep tool results
	// are still never cleared, but between triggers more than Keep stay
	// intact. Without it every request is decided on its full history
	// alone (Apply).
	StickyClears bool
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

// Applied is one entry of context_management.applied_edits: an edit that
// cleared something in this request, and everything it cleared (the
// request's whole history, as a stateless server reports it). An edit
// that cleared nothing is not listed: Anthropic's applied_edits is the
// list of edits that were applied, empty when none triggered.
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

// Sticky is a session's clears: each item's replacement text.
type Sticky map[itemKey]string

// Outcome is the result of applying rules to a request.
type Outcome struct {
	Messages []chat.Message
	// Applied is the request's applied_edits: every edit that cleared
	// something, with all it cleared.
	Applied []Applied
	// Next is the session's clears after this request: those its messages
	// hold (clears of items the request no longer holds are dropped).
	Next Sticky
	// Fresh is what this request cleared that the session's previous
	// request had not, by edit type: what the host's metrics count, and
	// the edits a connector-mode engine has spliced (prefill.go).
	Fresh []Applied
}

// Apply edits msgs by the rules, deterministically: the same messages,
// rules and previous clears give the same outcome, so a resent history
// gets the same edits and its prefix keeps hitting the cache.
//
// By default the decision is the documented one, made on the request's
// whole history alone (prev only tells what is new): clear_tool_uses
// triggers on the unedited input, then clears every eligible tool result
// but the newest Keep, or nothing when that frees fewer than ClearAtLeast
// tokens; clear_thinking keeps the reasoning of the newest Keep assistant
// turns. With r.StickyClears the session's previous clears are applied
// first and the rules add to them (see Rules.StickyClears). msgs is not
// modified.
func Apply(msgs []chat.Message, r Rules, prev Sticky) Outcome {
	e := newEditor(msgs)
	if r.StickyClears {
		e.applySticky(prev, r.Tools)
	}
	if r.Tools != nil {
		e.clearTools(r.Tools, r.StickyClears)
	}
	if r.Think != nil {
		e.clearThinking(r.Think)
	}
	return Outcome{Messages: e.out, Next: e.next, Applied: e.applied(nil), Fresh: e.applied(prev)}
}

type editor struct {
	in, out []chat.Message
	// next is this request's clears, and saved the tokens each freed.
	next  Sticky
	saved map[itemKey]int
	// callName maps a tool call id to its function name.
	callName map[string]string
}

func newEditor(msgs []chat.Message) *editor {
	out := make([]chat.Message, len(msgs))
	names := map[string]string{}
	for i, m := range msgs {
		out[i] = m
		out[i].ToolCalls = append([]chat.ToolCall(nil), m.ToolCalls...)
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Function.Name
		}
	}
	return &editor{in: msgs, out: out, next: Sticky{}, saved: map[itemKey]int{}, callName: names}
}

// applySticky re-applies the session's earlier clears (StickyClears),
// except of the newest tools.Keep tool results, which stay intact even
// when a rewound history brings a cleared one back among them.
func (e *editor) applySticky(prev Sticky, tools *ToolRule) {
	keep := 0
	if tools != nil {
		keep = tools.Keep
	}
	newest := e.newestResults(keep)
	for i, m := range e.in {
		if m.Role == "tool" && !newest[i] {
			if repl, ok := prev[keyOf('r', m.ToolCallID, m.Content)]; ok {
				e.clearResult(i, repl)
			}
		}
		for j, c := range m.ToolCalls {
			if repl, ok := prev[keyOf('i', c.ID, c.Function.Arguments)]; ok {
				e.clearInput(i, j, repl)
			}
		}
		if m.ThinkingText != "" {
			if repl, ok := prev[keyOf('t', "", m.ThinkingText)]; ok {
				e.clearThink(i, repl)
			}
		}
	}
}

// newestResults marks the messages holding the n newest tool results.
func (e *editor) newestResults(n int) map[int]bool {
	out := map[int]bool{}
	for i := len(e.in) - 1; i >= 0 && len(out) < n; i-- {
		if e.in[i].Role == "tool" {
			out[i] = true
		}
	}
	return out
}

// clear records one clear of key: the replacement, and what it freed.
func (e *editor) clear(k itemKey, repl string, freed int) bool {
	if _, done := e.next[k]; done {
		return false
	}
	e.next[k] = repl
	e.saved[k] = max(0, freed)
	return true
}

func (e *editor) clearResult(i int, repl string) {
	m := e.in[i]
	if e.clear(keyOf('r', m.ToolCallID, m.Content), repl, tokens(m.Content)-tokens(repl)) {
		e.out[i].Content = repl
	}
}

func (e *editor) clearInput(i, j int, repl string) {
	c := e.in[i].ToolCalls[j]
	if e.clear(keyOf('i', c.ID, c.Function.Arguments), repl, tokens(c.Function.Arguments)-tokens(repl)) {
		e.out[i].ToolCalls[j].Function.Arguments = repl
	}
}

func (e *editor) clearThink(i int, repl string) {
	m := e.in[i]
	if e.clear(keyOf('t', "", m.ThinkingText), repl, tokens("<think>"+m.ThinkingText+"</think>")-thinkTokens(repl)) {
		e.out[i].ThinkingText = repl
	}
}

func thinkTokens(repl string) int {
	if repl == "" {
		return 0
	}
	return tokens("<think>" + repl + "</think>")
}

// applied sums this request's clears by edit type, leaving out those prev
// already held (with the same replacement); an edit type that cleared
// nothing is not listed.
func (e *editor) applied(prev Sticky) []Applied {
	var uses, turns, toolTokens, thinkTokens int
	for k, n := range e.saved {
		if repl, old := prev[k]; old && repl == e.next[k] {
			continue
		}
		switch k.kind {
		case 'r':
			uses++
			toolTokens += n
		case 'i':
			toolTokens += n
		case 't':
			turns++
			thinkTokens += n
		}
	}
	var out []Applied
	if uses > 0 || toolTokens > 0 {
		out = append(out, Applied{Type: EditClearToolUses, ClearedToolUses: &uses, ClearedInputTokens: toolTokens})
	}
	if turns > 0 {
		out = append(out, Applied{Type: EditClearThinking, ClearedThinkingTurns: &turns, ClearedInputTokens: thinkTokens})
	}
	return out
}

// tokens counts text as the reference template's chunk4 tokenizer does
// (one token per 4 bytes); for other engines it is an estimate, used only
// for triggers, clear_at_least and the cleared counts.
func tokens(s string) int { return (len(s) + 3) / 4 }

// inputTokens counts the edited request as the reference template renders it.
func inputTokens(msgs []chat.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(tokens("<|im_start|>"+m.Role+"\n") + tokens("<|im_end|>\n"))
		if m.ThinkingText != "" {
			n += int64(tokens("<think>" + m.ThinkingText + "</think>"))
		}
		body := m.Content
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
