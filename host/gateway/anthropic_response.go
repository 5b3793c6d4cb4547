package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// anthropicMessageOut is a Messages response.
type anthropicMessageOut struct {
	ID                string         `json:"id"`
	Type              string         `json:"type"`
	Role              string         `json:"role"`
	Model             string         `json:"model"`
	Content           []any          `json:"content"`
	StopReason        *string        `json:"stop_reason"`
	StopSequence      *string        `json:"stop_sequence"`
	Usage             anthropicUsage `json:"usage"`
	ContextManagement *extension     `json:"context_management,omitempty"`
	// KVPilot and KVTransferParams carry what the engine reported (the
	// reference engine's costs; the vLLM connector's cached, loaded and
	// saved pages), as extensions.
	KVPilot          json.RawMessage `json:"kvpilot,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// anthropicUsage: Anthropic counts cache reads apart from input tokens.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func usageOf(u *chatwire.Usage) anthropicUsage {
	if u == nil {
		return anthropicUsage{}
	}
	c := u.Cached()
	return anthropicUsage{InputTokens: u.PromptTokens - c, OutputTokens: u.CompletionTokens, CacheReadInputTokens: c}
}

// stopReason maps OpenAI's finish_reason to Anthropic's stop_reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	}
	return "end_turn"
}

// thinkingSignature marks thinking that did not come from Anthropic (the
// field is required; only Anthropic's API can verify its own).
const thinkingSignature = "kvpilot-unsigned"

// relayAnthropic translates the upstream's completion into a Message.
func (s *Server) relayAnthropic(w http.ResponseWriter, resp *http.Response, t *turn, model string) {
	var c chatwire.Response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&c); err != nil || len(c.Choices) == 0 || c.Choices[0].Message == nil {
		writeAnthropic(w, &apiError{status: http.StatusBadGateway, err: errcode.Wrap(errcode.Unavailable, err, "upstream sent an unreadable completion")})
		return
	}
	m := c.Choices[0].Message
	content := []any{}
	if m.ThinkingText != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": m.ThinkingText, "signature": thinkingSignature})
	}
	if m.Content != "" || (m.ThinkingText == "" && len(m.ToolCalls) == 0) {
		content = append(content, map[string]any{"type": "text", "text": m.Content})
	}
	for _, tc := range m.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": toolUseID(tc.ID), "name": tc.Function.Name, "input": inputJSON(tc.Function.Arguments)})
	}
	finish := "stop"
	if f := c.Choices[0].FinishReason; f != nil {
		finish = *f
	}
	sr := stopReason(finish)
	rep := t.report()
	s.noteUsage(t, c.Usage)
	writeJSON(w, http.StatusOK, anthropicMessageOut{ID: messageID(c.ID), Type: "message", Role: "assistant", Model: model, Content: content,
		StopReason: &sr, Usage: usageOf(c.Usage), ContextManagement: &rep, KVPilot: c.KVPilot, KVTransferParams: c.KVTransferParams})
}

// inputJSON is a tool call's arguments as a JSON object (an invalid or
// empty argument string becomes {}).
func inputJSON(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" || !json.Valid([]byte(args)) {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

func messageID(upstream string) string {
	if upstream == "" {
		return "msg_kvpilot"
	}
	return "msg_" + upstream
}

func toolUseID(id string) string {
	if id == "" {
		return "toolu_kvpilot"
	}
	return id
}
