package chatwire

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/chunktok"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A message renders to the same tokens wherever it sits, and an edit of
// one message changes no other message's tokens: what session diff needs
// to align messages.
func TestRenderIsPrefixStableAndSpansBodies(t *testing.T) {
	a := Message{Role: "system", Content: "You are terse."}
	b := Message{Role: "assistant", ReasoningContent: "think", Content: "ok",
		ToolCalls: []ToolCall{{ID: "c", Function: FunctionCall{Name: "bash", Arguments: `{"cmd":"ls"}`}}}}
	c := Message{Role: "tool", ToolCallID: "c", Content: "file.txt"}
	toks, spans := Render([]Message{a, b, c}, chunktok.Tokenize)
	alone := RenderOne(b, chunktok.Tokenize)
	at := len(RenderOne(a, chunktok.Tokenize))
	if !slices.Equal(toks[at:at+len(alone)], alone) {
		t.Fatal("a message renders differently in a conversation")
	}
	sp := spans[1]
	if sp.ThinkStart != sp.Start || sp.ThinkEnd <= sp.ThinkStart || sp.End <= sp.ThinkEnd || sp.End > at+len(alone) {
		t.Fatalf("span %+v", sp)
	}
	edited := c
	edited.Content = "[cleared]"
	toks2, _ := Render([]Message{a, b, edited}, chunktok.Tokenize)
	if !slices.Equal(toks[:spans[2].Start], toks2[:spans[2].Start]) {
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
		toks, spans := Render(r.Messages, chunktok.Tokenize)
		for _, s := range spans {
			if s.Start > s.End || s.End > len(toks) {
				t.Fatalf("span %+v of %d tokens", s, len(toks))
			}
		}
	})
}
