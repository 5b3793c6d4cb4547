package policytest

import (
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// segKind labels a run of tokens in a simulated session.
type segKind uint8

const (
	segHeader      segKind = iota // chat template: role marker
	segThinking                   // <think>…</think> inside the body
	segContent                    // the message's content
	segFooter                     // chat template: end of message
	segReplacement                // what a splice put in
)

func (k segKind) body() bool { return k == segThinking || k == segContent || k == segReplacement }

type segment struct {
	msg  int
	kind segKind
	toks []uint32
}

type simMessage struct {
	chat.Message
	edited bool
}

// Session is the harness's model of one session's cached token sequence,
// message by message, as a host would keep it: template markers, thinking,
// content, and what splices replaced.
type Session struct {
	ID       string
	segs     []segment
	msgs     []simMessage
	thinking bool
}

// NewSession starts an empty session. With renderThinking, a message's
// thinking is rendered as <think>…</think> before its content, the way
// Qwen3- and DeepSeek-style templates do.
func NewSession(id string, renderThinking bool) *Session {
	return &Session{ID: id, thinking: renderThinking}
}

// Append renders m at the end of the session (its spans are the
// session's to set).
func (s *Session) Append(m chat.Message) {
	i := len(s.msgs)
	s.msgs = append(s.msgs, simMessage{Message: m})
	s.segs = append(s.segs, segment{i, segHeader, Tokenize("<|im_start|>" + m.Role + "\n")})
	if s.thinking && m.ThinkingText != "" {
		s.segs = append(s.segs, segment{i, segThinking, Tokenize("<think>" + m.ThinkingText + "</think>")})
	}
	body := m.Content
	if m.ToolName != "" && m.Role == "assistant" {
		body = "<tool_call>" + m.ToolName + " " + body + "</tool_call>"
	}
	if body == "" {
		body = " "
	}
	s.segs = append(s.segs, segment{i, segContent, Tokenize(body)})
	s.segs = append(s.segs, segment{i, segFooter, Tokenize("<|im_end|>\n")})
}

// Len returns the session's cached length in tokens.
func (s *Session) Len() int64 {
	var n int64
	for _, g := range s.segs {
		n += int64(len(g.toks))
	}
	return n
}

// Tokens returns the session's cached sequence.
func (s *Session) Tokens() []uint32 {
	out := make([]uint32, 0, s.Len())
	for _, g := range s.segs {
		out = append(out, g.toks...)
	}
	return out
}

// Messages returns the messages as a host reports them: spans over the
// current cached sequence, content as the request carried it.
func (s *Session) Messages() []chat.Message {
	out := make([]chat.Message, len(s.msgs))
	for i, m := range s.msgs {
		out[i] = chat.Message{Role: m.Role, ToolName: m.ToolName, Content: m.Content, ThinkingText: m.ThinkingText, Edited: m.edited,
			Span: chat.Span{Start: -1}}
	}
	var pos int64
	for _, g := range s.segs {
		end := pos + int64(len(g.toks))
		if g.kind.body() {
			m := &out[g.msg]
			if m.Span.Start < 0 {
				m.Span.Start = pos
			}
			m.Span.End = end
			if g.kind == segThinking {
				m.Thinking = append(m.Thinking, chat.Span{Start: pos, End: end})
			}
		}
		pos = end
	}
	return out
}

// Splice replaces [start, end) with repl. The span must lie inside one
// message's body: a policy that cuts across the chat template's markers is
// wrong, and the harness says so. An insertion (start == end) must sit at
// or inside a body segment.
func (s *Session) Splice(start, end int64, repl []uint32) error {
	if start < 0 || end < start || end > s.Len() || (start == end && len(repl) == 0) {
		return fmt.Errorf("splice [%d, %d) outside the session's %d tokens", start, end, s.Len())
	}
	out := make([]segment, 0, len(s.segs)+2)
	var pos int64
	msg := -1
	for _, g := range s.segs {
		gs, ge := pos, pos+int64(len(g.toks))
		pos = ge
		touches := gs < end && start < ge // shares a position with the span
		if start == end {
			touches = (gs < start && start < ge) || (gs == start && g.kind.body() && msg < 0)
		}
		if !touches {
			out = append(out, g)
			continue
		}
		if !g.kind.body() {
			return fmt.Errorf("splice [%d, %d) cuts the chat template of message %d", start, end, g.msg)
		}
		if msg >= 0 && msg != g.msg {
			return fmt.Errorf("splice [%d, %d) spans messages %d and %d", start, end, msg, g.msg)
		}
		if gs < start {
			out = append(out, segment{g.msg, g.kind, g.toks[:start-gs]})
		}
		if msg < 0 && len(repl) > 0 {
			out = append(out, segment{g.msg, segReplacement, repl})
		}
		msg = g.msg
		if end < ge {
			out = append(out, segment{g.msg, g.kind, g.toks[max(end, gs)-gs:]})
		}
	}
	if msg < 0 {
		return fmt.Errorf("splice [%d, %d) touches no message body", start, end)
	}
	s.segs = out
	s.msgs[msg].edited = true
	return nil
}

// thinkingPages returns the indexes of full pages lying wholly inside
// thinking segments of messages from index first on.
func (s *Session) thinkingPages(pageSize int, first int) []int {
	var out []int
	var pos int64
	type run struct{ s, e int64 }
	var runs []run
	for _, g := range s.segs {
		e := pos + int64(len(g.toks))
		if g.kind == segThinking && g.msg >= first {
			runs = append(runs, run{pos, e})
		}
		pos = e
	}
	ps := int64(pageSize)
	for _, r := range runs {
		for p := (r.s + ps - 1) / ps; (p+1)*ps <= r.e; p++ {
			out = append(out, int(p))
		}
	}
	return out
}
