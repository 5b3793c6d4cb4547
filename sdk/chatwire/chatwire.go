// Package chatwire holds the OpenAI Chat Completions wire types that
// kvpilot's front door (host/gateway) and the reference engine's HTTP server
// (examples/refengine) both speak, and the reference chat template that
// turns a conversation into tokens with per-message spans.
//
// Only what the two sides read is typed; the gateway forwards every other
// request field unchanged. Content is kept as text: a message's content may
// arrive as a string or as a list of text parts, and a part of any other
// type (an image) is refused with bad_request, because the reference
// template has no tokens for it.
package chatwire

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Message is one chat message in the OpenAI form. ReasoningContent is the
// assistant's thinking (vLLM's and DeepSeek's field name); the gateway puts
// an Anthropic thinking block there.
type Message struct {
	Role             string     `json:"role"`
	Content          Content    `json:"content"`
	Name             string     `json:"name,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
}

// ToolCall is an assistant's call of a function tool.
type ToolCall struct {
	// Index is set in streamed deltas only.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON arguments as text.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Tool is a function tool a request offers.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// Content is a message's text. It decodes a string, null, or a list of
// {"type":"text","text":...} parts (joined), and encodes as a string.
type Content string

// UnmarshalJSON accepts a string, null or a list of text parts.
func (c *Content) UnmarshalJSON(b []byte) error {
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
		*c = Content(s)
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
	*c = Content(sb.String())
	return nil
}

// StreamOptions is the request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Request is a chat completions request as the reference engine reads it.
type Request struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	KVTransferParams    json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// Limit is the request's output budget in tokens, 0 when it set none.
func (r *Request) Limit() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// KVParams is kvpilot's part of kv_transfer_params, {"kvpilot": {...}}: the
// session, tenant and cache_control a request's KV is filed under (the vLLM
// connector reads the same object).
type KVParams struct {
	Session      string          `json:"session,omitempty"`
	Tenant       string          `json:"tenant,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// ReadKVParams reads kv_transfer_params; absent params are the zero value.
func ReadKVParams(raw json.RawMessage) (KVParams, error) {
	var env struct {
		KVPilot *KVParams `json:"kvpilot"`
	}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return KVParams{}, nil
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return KVParams{}, errcode.Wrap(errcode.BadRequest, err, "kv_transfer_params")
	}
	if env.KVPilot == nil {
		return KVParams{}, nil
	}
	return *env.KVPilot, nil
}

// Usage is a response's token usage. CachedTokens is
// prompt_tokens_details.cached_tokens, as OpenAI reports prompt caching.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails breaks the prompt's tokens down.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Cached returns the usage's cached prompt tokens.
func (u Usage) Cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// Choice is one choice of a response (Message) or of a stream chunk (Delta).
type Choice struct {
	Index        int      `json:"index"`
	Message      *Message `json:"message,omitempty"`
	Delta        *Delta   `json:"delta,omitempty"`
	FinishReason *string  `json:"finish_reason"`
}

// Delta is what one stream chunk adds to the answer.
type Delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Response is a chat completion, or one chunk of a stream (Object
// "chat.completion.chunk"). KVPilot carries kvpilot's extension fields.
type Response struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []Choice        `json:"choices"`
	Usage   *Usage          `json:"usage,omitempty"`
	KVPilot json.RawMessage `json:"kvpilot,omitempty"`
	// KVTransferParams is what the engine's KV connector reports (vLLM
	// returns it in a completion).
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// ErrorBody is OpenAI's error shape, {"error": {...}}, with the registry's
// hint beside the message.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
	Hint    string  `json:"hint,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is GET /v1/models' answer.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}
