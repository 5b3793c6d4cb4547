// Package chatwire holds the OpenAI Chat Completions wire types that
// kvpilot's front door (host/gateway) and the reference engine's HTTP server
// (examples/refengine) both speak, and the reference chat template that
// turns a conversation into tokens with per-message spans. A message is a
// chat.Message, whose JSON is this wire's message.
//
// Only what the two sides read is typed; the gateway forwards every other
// request field unchanged.
package chatwire

import (
	"bytes"
	"encoding/json"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Tool is a function tool a request offers.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// StreamOptions is the request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Request is a chat completions request as the reference engine reads it.
type Request struct {
	Model               string          `json:"model"`
	Messages            []chat.Message  `json:"messages"`
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
	Index        int           `json:"index"`
	Message      *chat.Message `json:"message,omitempty"`
	Delta        *Delta        `json:"delta,omitempty"`
	FinishReason *string       `json:"finish_reason"`
}

// Delta is what one stream chunk adds to the answer.
type Delta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []chat.ToolCall `json:"tool_calls,omitempty"`
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
