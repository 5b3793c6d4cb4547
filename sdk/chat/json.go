package chat

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A Message's JSON is a chat completions message (OpenAI's form, which the
// front door and the reference engine's server speak): role, content,
// name (ToolName), tool_calls, tool_call_id and reasoning_content (the
// name vLLM and DeepSeek give ThinkingText). Spans and Edited are positions
// in a rendered prompt, which the JSON does not carry.

// wireMessage is a Message as its JSON holds it.
type wireMessage struct {
	Role             string     `json:"role"`
	Content          content    `json:"content"`
	Name             string     `json:"name,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
}

// MarshalJSON writes m as a chat completions message.
func (m Message) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireMessage{Role: m.Role, Content: content(m.Content), Name: m.ToolName, ToolCalls: m.ToolCalls,
		ToolCallID: m.ToolCallID, ReasoningContent: m.ThinkingText})
}

// UnmarshalJSON reads a chat completions message. Its content may be a
// string, null, or a list of text parts (joined); a part of any other type
// (an image) is refused with not_supported_yet, because kvpilot's chat
// template has no tokens for it.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w wireMessage
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message{Role: w.Role, Content: string(w.Content), ToolName: w.Name, ToolCalls: w.ToolCalls,
		ToolCallID: w.ToolCallID, ThinkingText: w.ReasoningContent}
	return nil
}

// content is a message's text on the wire: it decodes a string, null, or a
// list of {"type":"text","text":...} parts, and encodes as a string.
type content string

func (c *content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*c = ""
		return nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = content(s)
		return nil
	case b[0] != '[':
		return errcode.New(errcode.BadRequest, "content: want a string or a list of text parts")
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return errcode.New(errcode.NotSupportedYet, "content part %d has type %q: only text parts are supported", i, p.Type)
		}
		sb.WriteString(*p.Text)
	}
	*c = content(sb.String())
	return nil
}
