package chatwire

import "github.com/kvpilot/kvpilot/sdk/chat"

// The reference chat template, ChatML in shape:
//
//	<|im_start|>ROLE\n  [<think>REASONING</think>]  CONTENT  [<tool_call>NAME ARGS</tool_call>]...  <|im_end|>\n
//
// A tool message's content is its result. Each piece is tokenized on its
// own and the tokens are concatenated, so a message renders to the same
// tokens wherever it sits and an edit of one message never changes another
// message's tokens: the session diff then aligns messages exactly. A
// message's span (what the engine protocol reports, and what session diff
// aligns on) covers its body: thinking, content and tool calls, not the
// role markers. The prompt carries no generation prompt; the answer renders
// as one more assistant message, so the next turn's prompt extends the
// cached prompt and answer.

// Tokenizer turns text into token ids.
type Tokenizer func(string) []uint32

// Render renders msgs and returns the tokens, and the messages with their
// spans over them: Span covers the body, Thinking the reasoning when the
// message has some.
func Render(msgs []chat.Message, tok Tokenizer) ([]uint32, []chat.Message) {
	var out []uint32
	rendered := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		out, rendered[i] = appendMessage(out, m, tok)
	}
	return out, rendered
}

// RenderOne renders a single message (an answer) as it appears after a
// prompt.
func RenderOne(m chat.Message, tok Tokenizer) []uint32 {
	out, _ := appendMessage(nil, m, tok)
	return out
}

func appendMessage(out []uint32, m chat.Message, tok Tokenizer) ([]uint32, chat.Message) {
	out = append(out, tok("<|im_start|>"+m.Role+"\n")...)
	m.Span, m.Thinking = chat.Span{Start: int64(len(out))}, nil
	if m.ThinkingText != "" {
		start := int64(len(out))
		out = append(out, tok("<think>"+m.ThinkingText+"</think>")...)
		m.Thinking = []chat.Span{{Start: start, End: int64(len(out))}}
	}
	body := m.Content
	if body == "" && len(m.ToolCalls) == 0 {
		body = " " // every message has a body to align on
	}
	if body != "" {
		out = append(out, tok(body)...)
	}
	for _, c := range m.ToolCalls {
		out = append(out, tok("<tool_call>"+c.Function.Name+" "+c.Function.Arguments+"</tool_call>")...)
	}
	m.Span.End = int64(len(out))
	out = append(out, tok("<|im_end|>\n")...)
	return out, m
}

// Text is a message's body as the template renders it, for counting
// tokens without the markers.
func Text(m chat.Message) string {
	s := m.Content
	if m.ThinkingText != "" {
		s = "<think>" + m.ThinkingText + "</think>" + s
	}
	for _, c := range m.ToolCalls {
		s += "<tool_call>" + c.Function.Name + " " + c.Function.Arguments + "</tool_call>"
	}
	return s
}
