package scenario

// The front door's chat client, which the gateway scenario and the demo
// share: a trace rendered as a harness's chat requests (ChatTurns), each
// sent streaming and read to the end (StreamChat).

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/gateway"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// readChatStream reads an OpenAI stream: the time to its first chunk, the
// usage and kvpilot's extension in its usage chunk, the applied edits of
// its first chunk, the answer's text; an error event fails it.
func readChatStream(r io.Reader, start time.Time) (ChatResult, error) {
	var res ChatResult
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	first := true
	var text strings.Builder
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if first {
			res.TTFTms = float64(time.Since(start).Microseconds()) / 1e3
		}
		if line == "[DONE]" {
			res.E2Ems = float64(time.Since(start).Microseconds()) / 1e3
			res.Text = text.String()
			return res, nil
		}
		var c struct {
			chatwire.Response
			// vLLM's error event carries a numeric code: only the
			// message is read.
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
			ContextManagement *struct {
				AppliedEdits []struct {
					ClearedToolUses int `json:"cleared_tool_uses"`
				} `json:"applied_edits"`
			} `json:"context_management"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return res, fmt.Errorf("chunk: %w", err)
		}
		if c.Error != nil {
			return res, fmt.Errorf("stream error: %s", c.Error.Message)
		}
		if first && c.ContextManagement != nil {
			for _, a := range c.ContextManagement.AppliedEdits {
				res.Cleared += a.ClearedToolUses
			}
		}
		first = false
		for _, ch := range c.Choices {
			if ch.Delta != nil && ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		if c.Usage != nil {
			res.Prompt, res.Cached = c.Usage.PromptTokens, c.Usage.Cached()
			var st refengine.Stats
			if json.Unmarshal(c.KVPilot, &st) == nil {
				res.ModelledMs = st.TTFTms
			}
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, io.ErrUnexpectedEOF
}

// Turn is one request of a chat session: the full history a harness sends.
type Turn struct{ Messages []chat.Message }

// ChatTurns renders a trace as a harness's chat requests: each run of
// assistant messages is one request's answer, one assistant message (its
// texts and thinking joined, thinking as reasoning_content, its tool uses
// as tool calls with ids), and every request resends the whole history
// before it. Tool results answer the answer's calls in order, as chat
// APIs require: a result the trace holds no call for (an agent whose
// action is in its text) gets a call of its own in the answer, a call the
// trace holds no result for is left out, and a result after no answer at
// all is a user message.
func ChatTurns(tr Trace, system string, maxRequests int) []Turn {
	hist := []chat.Message{{Role: "system", Content: system}}
	var out []Turn
	answer := -1   // hist's index of the current answer, while its results follow it
	var open []int // indices into hist[answer].ToolCalls not yet answered, oldest first
	endResults := func() {
		if answer < 0 {
			return
		}
		a := &hist[answer]
		kept := a.ToolCalls[:0:0]
		for j, c := range a.ToolCalls {
			if !slices.Contains(open, j) {
				kept = append(kept, c)
			}
		}
		a.ToolCalls, answer, open = kept, -1, nil
	}
	// call adds a call to the answer, open until a result answers it.
	call := func(a *chat.Message, i int, name, args string) {
		open = append(open, len(a.ToolCalls))
		a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function",
			Function: chat.FunctionCall{Name: name, Arguments: args}})
	}
	for i, m := range tr.Messages {
		switch m.Role {
		case "assistant":
			if i == 0 || tr.Messages[i-1].Role != "assistant" {
				endResults()
				if maxRequests > 0 && len(out) >= maxRequests {
					return out
				}
				out = append(out, Turn{Messages: append([]chat.Message(nil), hist...)})
				hist = append(hist, chat.Message{Role: "assistant"})
				answer = len(hist) - 1
			}
			a := &hist[answer]
			a.ThinkingText = joined(a.ThinkingText, m.ThinkingText)
			if m.ToolName == "" {
				a.Content = joined(a.Content, m.Content)
				continue
			}
			args, _ := json.Marshal(map[string]string{"input": m.Content})
			call(a, i, m.ToolName, string(args))
		case "tool":
			if answer < 0 {
				hist = append(hist, chat.Message{Role: "user", Content: m.Content})
				continue
			}
			a := &hist[answer]
			if len(open) == 0 { // a result of an action the answer's text took
				call(a, i, cmp.Or(m.ToolName, "tool"), "{}")
			}
			c := a.ToolCalls[open[0]]
			open = open[1:]
			hist = append(hist, chat.Message{Role: "tool", ToolCallID: c.ID, ToolName: c.Function.Name, Content: m.Content})
		default:
			endResults()
			role := m.Role
			if role != "user" && role != "system" {
				role = "user"
			}
			hist = append(hist, chat.Message{Role: role, Content: m.Content, ThinkingText: m.ThinkingText})
		}
	}
	return out
}

// joined appends b to a on a new line.
func joined(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

// ChatResult is one streamed answer as the client saw it: the prompt and
// cached tokens of its usage, the tool uses its applied_edits report
// cleared, the time to its first chunk and to its end, the engine's
// modelled TTFT (the reference engine's) and the answer's text.
type ChatResult struct {
	Prompt, Cached, Cleared   int
	TTFTms, E2Ems, ModelledMs float64
	Text                      string
}

// HTTPError is a request the server answered with an error status: its
// status, the error's code or type from an OpenAI error body, and the body.
type HTTPError struct {
	Status int
	Code   string
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("server answered %d (%s): %s", e.Status, e.Code, e.Body)
}

// httpError reads an error response.
func httpError(resp *http.Response) *HTTPError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	var body struct {
		Error struct {
			Code any    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil {
		if c, ok := body.Error.Code.(string); ok && c != "" {
			e.Code = c
		} else {
			e.Code = body.Error.Type
		}
	}
	return e
}

// RefModel is the model name the reference engine serves.
const RefModel = "ref-gqa"

// StreamChat sends one streaming chat completions request to model (16
// tokens, greedy) through the front door at url, in session, and reads it
// to the end.
func StreamChat(ctx context.Context, url, model, session string, msgs []chat.Message) (ChatResult, error) {
	return StreamChatWith(ctx, url, model, session, msgs, nil)
}

// StreamChatWith is StreamChat with extra fields in the request's body
// (kv_transfer_params for vLLM's KV connector, say).
func StreamChatWith(ctx context.Context, url, model, session string, msgs []chat.Message, extra map[string]any) (ChatResult, error) {
	var res ChatResult
	fields := map[string]any{"model": model, "messages": msgs, "max_tokens": 16, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true}}
	for k, v := range extra {
		fields[k] = v
	}
	body, _ := json.Marshal(fields)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.SessionHeader, session)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, httpError(resp)
	}
	return readChatStream(resp.Body, start)
}
