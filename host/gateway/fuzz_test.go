package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The request parsers and the upstream's event stream are reachable by
// peers: they must answer bad input with a registry error, never panic,
// and whatever they accept must edit and forward cleanly.

func FuzzParseOpenAI(f *testing.F) {
	for _, s := range []string{
		oaBody,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
		`{"model":"m","messages":[],"context_management":{"edits":[{"type":"clear_tool_uses_20250919","keep":{"type":"tool_uses","value":0}}]}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
		`{"model":"m","prompt_cache_options":{"mode":"implicit","ttl":"30m"},"prompt_cache_retention":"24h","messages":[{"role":"user","content":[{"type":"text","text":"a","prompt_cache_breakpoint":{"mode":"explicit","ttl":"12h"}}]}]}`,
		`{"model":1}`, `[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, raw, err := ParseOpenAI(b)
		if err != nil {
			requireRegistry(t, err)
			return
		}
		rules, err := req.ContextManagement.rules()
		if err != nil {
			requireRegistry(t, err)
			return
		}
		breaks, err := openAIBreakpoints(raw, len(req.Messages))
		if err != nil {
			requireRegistry(t, err)
			return
		}
		for _, b := range breaks {
			if b.Msg < 0 || b.Msg >= len(req.Messages) || b.TTL < 0 {
				t.Fatalf("breakpoint %+v of %d messages", b, len(req.Messages))
			}
		}
		exercise(t, raw, req.Messages, rules)
	})
}

func FuzzParseAnthropic(f *testing.F) {
	for _, s := range []string{
		anBody,
		`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"u","name":"bash","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"r"}],"is_error":true}]}]}`,
		`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"}],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"},{"type":"clear_tool_uses_20250919","trigger":{"type":"tool_uses","value":2},"clear_at_least":{"type":"input_tokens","value":5},"exclude_tools":["m"],"clear_tool_inputs":["bash"]}]}}`,
		`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x","cache_control":{"type":"ephemeral","ttl":"-5"}}]}`,
		`{"model":"m","max_tokens":8,"tool_choice":{"type":"tool","name":"f"},"tools":[{"name":"f","input_schema":{}}],"messages":[{"role":"user","content":[]}]}`,
		`{"max_tokens":8}`, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":7}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, msgs, breaks, fwd, err := ParseAnthropic(b)
		if err != nil {
			requireRegistry(t, err)
			return
		}
		for _, bp := range breaks {
			if bp.Msg < 0 || bp.Msg >= len(msgs) {
				t.Fatalf("breakpoint at message %d of %d", bp.Msg, len(msgs))
			}
		}
		rules, err := req.ContextManagement.rules()
		if err != nil {
			requireRegistry(t, err)
			return
		}
		exercise(t, fwd, msgs, rules)
	})
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: {}\n\ndata: [DONE]\n\n", "event: x\ndata: a\ndata: b\n\n", ": comment\n\n", "data: cut", "\r\n\r\ndata:x\r\n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rd := newSSEReader(strings.NewReader(s))
		for i := 0; i <= len(s); i++ {
			if _, err := rd.next(); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("error %v", err)
				}
				return
			}
		}
		t.Fatal("more events than bytes")
	})
}

// exercise edits what a parser accepted with every rule and checks the
// forwarded body is JSON.
func exercise(t *testing.T, raw map[string]json.RawMessage, msgs []chat.Message, own *Rules) {
	t.Helper()
	r := Rules{Tools: toolRule(0, 0), Think: &ThinkRule{Keep: 0}}
	if own != nil {
		r = *own
	}
	s := New(Config{Upstream: "http://127.0.0.1:1"}, nil)
	tr := &turn{sess: session{id: "x"}, out: Apply(msgs, r, Sticky{})}
	for _, sticky := range []bool{false, true} {
		r.StickyClears = sticky
		if again := Apply(msgs, r, tr.out.Next); len(again.Fresh) != 0 {
			t.Fatalf("re-applying a request's own clears (sticky %v) made new ones: %+v", sticky, again.Fresh)
		}
	}
	b, e := s.forwardBody(raw, tr)
	if e != nil {
		return
	}
	if !json.Valid(b) {
		t.Fatalf("forwarded body is not JSON: %s", b)
	}
}

func requireRegistry(t *testing.T, err error) {
	t.Helper()
	if _, ok := errcode.As(err); !ok {
		t.Fatalf("not a registry error: %v", err)
	}
}
