package chatwire

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

// Span is a message's token span [Start, End) with its thinking span
// (ThinkStart == ThinkEnd when it has none).
type Span struct {
	Start, End           int
	ThinkStart, ThinkEnd int
}

// Tokenizer turns text into token ids.
type Tokenizer func(string) []uint32

// Render renders msgs and returns the tokens and each message's span.
func Render(msgs []Message, tok Tokenizer) ([]uint32, []Span) {
	var out []uint32
	spans := make([]Span, len(msgs))
	for i, m := range msgs {
		out, spans[i] = appendMessage(out, m, tok)
	}
	return out, spans
}

// RenderOne renders a single message (an answer) as it appears after a
// prompt.
func RenderOne(m Message, tok Tokenizer) []uint32 {
	out, _ := appendMessage(nil, m, tok)
	return out
}

func appendMessage(out []uint32, m Message, tok Tokenizer) ([]uint32, Span) {
	out = append(out, tok("<|im_start|>"+m.Role+"\n")...)
	sp := Span{Start: len(out)}
	if m.ReasoningContent != "" {
		sp.ThinkStart = len(out)
		out = append(out, tok("<think>"+m.ReasoningContent+"</think>")...)
		sp.ThinkEnd = len(out)
	} else {
		sp.ThinkStart, sp.ThinkEnd = len(out), len(out)
	}
	body := string(m.Content)
	if body == "" && len(m.ToolCalls) == 0 {
		body = " " // every message has a body to align on
	}
	if body != "" {
		out = append(out, tok(body)...)
	}
	for _, c := range m.ToolCalls {
		out = append(out, tok("<tool_call>"+c.Function.Name+" "+c.Function.Arguments+"</tool_call>")...)
	}
	sp.End = len(out)
	out = append(out, tok("<|im_end|>\n")...)
	return out, sp
}

// Text is a message's body as the template renders it, for counting
// tokens without the markers.
func Text(m Message) string {
	s := string(m.Content)
	if m.ReasoningContent != "" {
		s = "<think>" + m.ReasoningContent + "</think>" + s
	}
	for _, c := range m.ToolCalls {
		s += "<tool_call>" + c.Function.Name + " " + c.Function.Arguments + "</tool_call>"
	}
	return s
}
