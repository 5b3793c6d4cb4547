package convert

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvpilot/kvpilot/sdk/chat"
)

// A prompt's messages cross the engine protocol unchanged (Edited is the
// host's to set, so it does not travel), and text that is not UTF-8, which
// a proto string cannot carry, arrives with U+FFFD in place of the bad
// bytes instead of failing the call.
func TestChatMessagesRoundTrip(t *testing.T) {
	in := []chat.Message{
		{Role: "system", Content: "be brief", Span: chat.Span{Start: 3, End: 7}},
		{Role: "assistant", ToolName: "bash", Content: "ls", ThinkingText: "look first",
			Span: chat.Span{Start: 10, End: 30}, Thinking: []chat.Span{{Start: 10, End: 20}}},
	}
	out := ChatMessagesFromProto(ChatMessagesToProto(in))
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	bad := []chat.Message{{Role: "tool", Content: "cut\xff\xfehere", ThinkingText: "\xc3"}}
	p := ChatMessagesToProto(bad)
	if _, err := proto.Marshal(p[0]); err != nil {
		t.Fatalf("invalid UTF-8 reached the wire: %v", err)
	}
	if got := ChatMessagesFromProto(p)[0]; got.Content != "cut\uFFFDhere" || got.ThinkingText != "\uFFFD" {
		t.Fatalf("invalid UTF-8 became %q, %q", got.Content, got.ThinkingText)
	}
}
