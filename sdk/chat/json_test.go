package chat

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A Message's JSON is the chat completions message: content as a string
// (text parts joined on the way in), name as ToolName, reasoning_content as
// ThinkingText, tool calls and the call a result answers; the spans, which
// the JSON does not carry, stay out of it.
func TestMessageJSON(t *testing.T) {
	in := `{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"bot",` +
		`"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}}],"reasoning_content":"hm","extra":1}`
	var m Message
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	want := Message{Role: "assistant", Content: "ab", ToolName: "bot", ThinkingText: "hm",
		ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "bash", Arguments: "{}"}}}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decoded %+v, want %+v", m, want)
	}
	m.Span, m.Thinking, m.Edited = Span{Start: 1, End: 9}, []Span{{Start: 1, End: 3}}, true
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"role":"assistant","content":"ab","name":"bot",`+
		`"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}}],"reasoning_content":"hm"}`; got != want {
		t.Fatalf("encoded %s\nwant %s", got, want)
	}
	b, _ = json.Marshal(Message{Role: "tool", ToolCallID: "c1", Content: ""})
	if got := string(b); got != `{"role":"tool","content":"","tool_call_id":"c1"}` {
		t.Fatalf("a tool result encodes as %s", got)
	}
	for body, code := range map[string]errcode.Code{
		`{"role":"user","content":[{"type":"image_url"}]}`: errcode.NotSupportedYet,
		`{"role":"user","content":5}`:                      errcode.BadRequest,
	} {
		err := json.Unmarshal([]byte(body), &m)
		if e, ok := errcode.As(err); !ok || e.Code != code {
			t.Errorf("%s: %v, want %s", body, err, code)
		}
	}
}
