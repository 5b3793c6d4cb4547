package convert

import (
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// ChatMessagesToProto writes a prompt's messages as the engine protocol
// carries them. Proto strings must be UTF-8; bytes that are not (a
// redaction or a cut in a recorded trace) become U+FFFD.
func ChatMessagesToProto(ms []chat.Message) []*pb.ChatMessage {
	if ms == nil {
		return nil
	}
	out := make([]*pb.ChatMessage, len(ms))
	for i, m := range ms {
		out[i] = &pb.ChatMessage{Role: m.Role, ToolName: m.ToolName, Content: strings.ToValidUTF8(m.Content, "\uFFFD"),
			ThinkingText: strings.ToValidUTF8(m.ThinkingText, "\uFFFD"), Span: tokenSpanToProto(m.Span)}
		for _, t := range m.Thinking {
			out[i].Thinking = append(out[i].Thinking, tokenSpanToProto(t))
		}
	}
	return out
}

// ChatMessagesFromProto reads a prompt's messages from the engine
// protocol; the engine service checks their spans.
func ChatMessagesFromProto(ms []*pb.ChatMessage) []chat.Message {
	if ms == nil {
		return nil
	}
	out := make([]chat.Message, len(ms))
	for i, m := range ms {
		out[i] = chat.Message{Role: m.GetRole(), ToolName: m.GetToolName(), Content: m.GetContent(),
			ThinkingText: m.GetThinkingText(), Span: tokenSpanFromProto(m.GetSpan())}
		for _, t := range m.GetThinking() {
			out[i].Thinking = append(out[i].Thinking, tokenSpanFromProto(t))
		}
	}
	return out
}

func tokenSpanToProto(s chat.Span) *pb.TokenSpan {
	return &pb.TokenSpan{Start: uint32(s.Start), End: uint32(s.End)}
}

func tokenSpanFromProto(s *pb.TokenSpan) chat.Span {
	return chat.Span{Start: int64(s.GetStart()), End: int64(s.GetEnd())}
}
