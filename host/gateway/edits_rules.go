package gateway

import (
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// clearTools decides the rule's clears of tool results: every eligible
// result but the newest Keep, all or none (clear_at_least). By default the
// trigger is measured on the unedited input; with sticky clears, on the
// prompt as the session's earlier clears left it, and only the results
// they did not clear count toward clear_at_least.
func (e *editor) clearTools(r *ToolRule, sticky bool) {
	measured := e.in
	if sticky {
		measured = e.out
	}
	if !triggered(r, measured) {
		return
	}
	age := chat.TurnAges(e.out)
	type cand struct {
		msg   int
		repl  string
		saved int
	}
	var cands []cand
	var saved int64
	nth := 0 // 1 = the newest tool result
	for i := len(e.in) - 1; i >= 0; i-- {
		m := e.in[i]
		if m.Role != "tool" {
			continue
		}
		nth++
		name := strings.ToLower(e.callName[m.ToolCallID])
		if name == "" {
			name = strings.ToLower(m.ToolName)
		}
		switch {
		case nth <= r.Keep, r.OlderThan >= 0 && age[i] <= r.OlderThan, r.Exclude[name], r.Only != nil && !r.Only[name]:
			continue
		}
		if _, done := e.next[keyOf('r', m.ToolCallID, m.Content)]; done {
			continue
		}
		repl := r.Replace(m.Content)
		if repl == "" {
			continue
		}
		s := tokens(m.Content) - tokens(repl)
		cands = append(cands, cand{i, repl, s})
		saved += int64(s)
	}
	if len(cands) == 0 || saved < r.ClearAtLeast {
		return
	}
	for k := len(cands) - 1; k >= 0; k-- { // oldest first
		c := cands[k]
		e.clearResult(c.msg, c.repl)
		if r.ClearInputs {
			e.clearInputsOf(e.in[c.msg].ToolCallID, r)
		}
	}
}

// triggered reports whether msgs reach the rule's trigger.
func triggered(r *ToolRule, msgs []chat.Message) bool {
	switch r.TriggerType {
	case "":
		return true
	case "tool_uses":
		n := 0
		for _, m := range msgs {
			n += len(m.ToolCalls)
		}
		return int64(n) >= r.TriggerValue
	}
	return inputTokens(msgs) >= r.TriggerValue
}

// clearInputsOf clears the arguments of the call whose result was cleared.
func (e *editor) clearInputsOf(callID string, r *ToolRule) {
	if callID == "" {
		return
	}
	for i, m := range e.in {
		for j, c := range m.ToolCalls {
			if c.ID != callID || (r.InputsOf != nil && !r.InputsOf[strings.ToLower(c.Function.Name)]) {
				continue
			}
			if c.Function.Arguments != clearedInput {
				e.clearInput(i, j, clearedInput)
			}
		}
	}
}

// clearedInput is what a cleared tool call's arguments become.
const clearedInput = "{}"

// clearThinking clears the reasoning of every assistant turn but the
// newest r.Keep (consecutive assistant messages are one turn).
func (e *editor) clearThinking(r *ThinkRule) {
	if r.Keep < 0 {
		return
	}
	age := chat.TurnAges(e.out)
	for i, m := range e.in {
		// age counts the assistant turns after a message; an assistant
		// message of the newest turn has age 0.
		if m.Role != "assistant" || m.ThinkingText == "" || age[i] < r.Keep {
			continue
		}
		e.clearThink(i, r.Placeholder)
	}
}
