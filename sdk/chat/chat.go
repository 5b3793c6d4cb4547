// Package chat holds kvpilot's one chat message type. A message of a
// conversation is the same Go value wherever kvpilot handles it: the front
// door's requests (host/gateway) and the reference engine's server, whose
// HTTP wire is the chat completions form (sdk/chatwire); a prompt's
// messages on the engine protocol (sdk/engineclient, host/engine); a
// policy's observations (sdk/policy); and recorded agent traces
// (sdk/policytest). Its wire forms are converted at the edges only: its
// JSON is the chat completions message (json.go), the engine and plugin
// protocols' proto messages are converted where they are sent and read,
// and the traces' JSON Lines where they are loaded.
package chat

// Message is one chat message.
//
// Span and Thinking index the token sequence of a rendered prompt. The
// engine reports them with the prompt it sends; a policy observes them with
// the host's edits already accounted for, so it can put the positions
// straight into a Splice. A message that is not part of a rendered prompt
// (a trace's) has none.
type Message struct {
	Role string // system, user, assistant, tool (a chat API's developer too)
	// ToolName: for a tool result, the tool; for an assistant tool call on
	// the engine protocol or in a trace, the called tool. A chat API's
	// message carries it as its name.
	ToolName string
	// Content is the message text.
	Content string
	// ThinkingText is the reasoning text when the message carries it as a
	// field of its own (a trace's thinking, a chat API's reasoning_content).
	ThinkingText string
	// ToolCalls are an assistant's calls of function tools, as a chat API
	// sends them; ToolCallID is the call a tool result answers.
	ToolCalls  []ToolCall
	ToolCallID string
	// Span covers the message's content, without the chat template's role
	// markers, so an edit of the whole span keeps the template intact.
	Span Span
	// Thinking are the reasoning spans inside Span: a `<think>…</think>`
	// block with its tags, or the rendered thinking field.
	Thinking []Span
	// Edited is set when the host has already replaced part of this
	// message's cached span (a policy's earlier splice). Policies that edit
	// whole messages skip edited ones, which keeps them correct across a
	// plugin restart that lost their own memory.
	Edited bool
}

// ToolCall is an assistant's call of a function tool, in the chat
// completions form (its JSON is that form's).
type ToolCall struct {
	// Index is set in streamed deltas only.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON arguments as text.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Span is the token range [Start, End) of a prompt.
type Span struct {
	Start int64
	End   int64
}

// Len returns End - Start.
func (s Span) Len() int64 { return s.End - s.Start }

// TurnAges returns, for every message, how many assistant turns start
// after it. Consecutive assistant messages are one turn: harnesses split
// one response into text and tool-call messages.
func TurnAges(ms []Message) []int {
	age := make([]int, len(ms))
	n := 0
	for i := len(ms) - 1; i >= 0; i-- {
		age[i] = n
		if ms[i].Role == "assistant" && (i == 0 || ms[i-1].Role != "assistant") {
			n++
		}
	}
	return age
}
