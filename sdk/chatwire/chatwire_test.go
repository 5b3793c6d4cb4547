package chatwire

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chunktok"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A message renders to the same tokens wherever it sits, and an edit of
// one message changes no other message's tokens: what session diff needs
// to align messages.
func TestRenderIsPrefixStableAndSpansBodies(t *testing.T) {
	a := chat.Message{Role: "system", Content: "You are terse."}
	b := chat.Message{Role: "assistant", ThinkingText: "think", Content: "ok",
		ToolCalls: []chat.ToolCall{{ID: "c", Function: chat.FunctionCall{Name: "bash", Arguments: `{"cmd":"ls"}`}}}}
	c := chat.Message{Role: "tool", ToolCallID: "c", Content: "file.txt"}
	toks, rendered := Render([]chat.Message{a, b, c}, chunktok.Tokenize)
	alone := RenderOne(b, chunktok.Tokenize)
	at := int64(len(RenderOne(a, chunktok.Tokenize)))
	if !slices.Equal(toks[at:at+int64(len(alone))], alone) {
		t.Fatal("a message renders differently in a conversation")
	}
	sp, th := rendered[1].Span, rendered[1].Thinking
	if len(th) != 1 || th[0].Start != sp.Start || th[0].End <= th[0].Start || sp.End <= th[0].End || sp.End > at+int64(len(alone)) {
		t.Fatalf("span %+v, thinking %+v", sp, th)
	}
	if len(rendered[0].Thinking) != 0 {
		t.Fatalf("a message without reasoning has thinking %+v", rendered[0].Thinking)
	}
	edited := c
	edited.Content = "[cleared]"
	toks2, _ := Render([]chat.Message{a, b, edited}, chunktok.Tokenize)
	if end := rendered[2].Span.Start; !slices.Equal(toks[:end], toks2[:end]) {
		t.Fatal("editing the last message changed an earlier one")
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"kv_transfer_params":{"kvpilot":{"session":"s","tenant":"t","cache_control":{"type":"ephemeral"}}}}`,
		`{"messages":[{"content":[{"type":"image_url"}]}]}`,
		`{"messages":[{"content":5}]}`, `{"kv_transfer_params":{"kvpilot":7}}`, `{"max_tokens":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		if _, err := ReadKVParams(r.KVTransferParams); err != nil {
			if _, ok := errcode.As(err); !ok {
				t.Fatalf("not a registry error: %v", err)
			}
		}
		_ = r.Limit()
		toks, rendered := Render(r.Messages, chunktok.Tokenize)
		for _, m := range rendered {
			if s := m.Span; s.Start > s.End || s.End > int64(len(toks)) {
				t.Fatalf("span %+v of %d tokens", s, len(toks))
			}
		}
	})
}
