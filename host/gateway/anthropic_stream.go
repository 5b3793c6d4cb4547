package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// anthropicStream turns OpenAI chunks into Anthropic's events:
// message_start, then for each content block content_block_start, its
// deltas and content_block_stop, then message_delta (stop reason, usage,
// context_management) and message_stop.
type anthropicStream struct {
	sw    *sseWriter
	index int    // the open block's index
	open  string // the open block's type, "" when none
	// tool is the index of the upstream tool call whose block is open.
	tool   int
	finish string
	usage  *chatwire.Usage
}

func (a *anthropicStream) event(name string, v any) {
	b, _ := json.Marshal(v)
	a.sw.send(name, b)
}

// relayAnthropicStream translates the upstream's stream; a stream cut
// midway ends with Anthropic's error event.
func (s *Server) relayAnthropicStream(w http.ResponseWriter, resp *http.Response, t *turn, model string) {
	a := &anthropicStream{sw: startSSE(w), index: -1, tool: -1}
	est := int(inputTokens(t.out.Messages))
	a.event("message_start", map[string]any{"type": "message_start", "message": anthropicMessageOut{
		ID: fmt.Sprintf("msg_kvpilot_%x", time.Now().UnixNano()), Type: "message", Role: "assistant", Model: model, Content: []any{},
		Usage: anthropicUsage{InputTokens: est}}})
	rd := newSSEReader(resp.Body)
	for {
		ev, err := rd.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			s.cfg.Log.Warn("upstream stream cut", "session", t.sess.id, "error", err)
			body, _ := anthropicErr(&apiError{status: http.StatusBadGateway,
				err: errcode.Wrap(errcode.Unavailable, err, "the upstream stream ended before it finished")})
			a.event("error", body)
			return
		}
		if ev.data == "[DONE]" {
			a.finishMessage(t)
			return
		}
		var c struct {
			chatwire.Response
			// Error's code is a number in vLLM's and a string in
			// OpenAI's: only the message is read.
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(ev.data), &c) != nil {
			continue // not a chunk (a comment, a keep-alive)
		}
		if c.Error != nil { // the engine failed midway and said so
			body, _ := anthropicErr(&apiError{status: http.StatusBadGateway,
				err: errcode.New(errcode.Unavailable, "upstream: %s", c.Error.Message)})
			a.event("error", body)
			return
		}
		if c.Usage != nil {
			a.usage = c.Usage
			s.noteUsage(t, c.Usage)
		}
		for _, ch := range c.Choices {
			a.choice(ch)
		}
	}
}

func (a *anthropicStream) choice(ch chatwire.Choice) {
	if ch.FinishReason != nil {
		a.finish = *ch.FinishReason
	}
	d := ch.Delta
	if d == nil {
		return
	}
	if d.ReasoningContent != nil && *d.ReasoningContent != "" {
		a.ensure("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""})
		a.delta(map[string]any{"type": "thinking_delta", "thinking": *d.ReasoningContent})
	}
	if d.Content != nil && *d.Content != "" {
		a.ensure("text", map[string]any{"type": "text", "text": ""})
		a.delta(map[string]any{"type": "text_delta", "text": *d.Content})
	}
	for _, tc := range d.ToolCalls {
		i := 0
		if tc.Index != nil {
			i = *tc.Index
		}
		if a.open != "tool_use" || a.tool != i {
			a.close()
			a.start("tool_use", map[string]any{"type": "tool_use", "id": toolUseID(tc.ID), "name": tc.Function.Name, "input": map[string]any{}})
			a.tool = i
		}
		if tc.Function.Arguments != "" {
			a.delta(map[string]any{"type": "input_json_delta", "partial_json": tc.Function.Arguments})
		}
	}
}

// ensure opens a block of typ unless one is open.
func (a *anthropicStream) ensure(typ string, b map[string]any) {
	if a.open == typ {
		return
	}
	a.close()
	a.start(typ, b)
}

func (a *anthropicStream) start(typ string, b map[string]any) {
	a.index++
	a.open = typ
	a.event("content_block_start", map[string]any{"type": "content_block_start", "index": a.index, "content_block": b})
}

func (a *anthropicStream) delta(d map[string]any) {
	a.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": a.index, "delta": d})
}

func (a *anthropicStream) close() {
	if a.open == "" {
		return
	}
	if a.open == "thinking" {
		a.delta(map[string]any{"type": "signature_delta", "signature": thinkingSignature})
	}
	a.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": a.index})
	a.open, a.tool = "", -1
}

func (a *anthropicStream) finishMessage(t *turn) {
	a.close()
	sr := stopReason(a.finish)
	u := usageOf(a.usage)
	rep := t.report()
	a.event("message_delta", map[string]any{"type": "message_delta",
		"delta":              map[string]any{"stop_reason": sr, "stop_sequence": nil},
		"usage":              u,
		"context_management": rep})
	a.event("message_stop", map[string]any{"type": "message_stop"})
}
