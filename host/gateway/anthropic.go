package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// anthropicRequest is an Anthropic Messages request, the fields the
// front door translates; others (metadata, top_k, thinking's budget) are
// not forwarded.
type anthropicRequest struct {
	Model             string             `json:"model"`
	MaxTokens         *int               `json:"max_tokens"`
	System            json.RawMessage    `json:"system"`
	Messages          []anthropicMessage `json:"messages"`
	Stream            bool               `json:"stream"`
	Tools             []anthropicTool    `json:"tools"`
	ToolChoice        *anthropicChoice   `json:"tool_choice"`
	StopSequences     []string           `json:"stop_sequences"`
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	ContextManagement *contextManagement `json:"context_management"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is a content block of any type; the fields of its type are set.
type block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	Thinking     string          `json:"thinking,omitempty"`
	Signature    string          `json:"signature,omitempty"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthropicChoice struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// ParseAnthropic reads a Messages request and translates it to the
// upstream's chat form: the messages, their cache_control breakpoints and
// the forwarded request fields.
func ParseAnthropic(body []byte) (anthropicRequest, []chat.Message, []breakpoint, map[string]json.RawMessage, error) {
	var req anthropicRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, nil, nil, nil, errcode.FromJSON(err, "messages request")
	}
	switch {
	case req.Model == "":
		return req, nil, nil, nil, errcode.New(errcode.MissingField, "model")
	case req.MaxTokens == nil:
		return req, nil, nil, nil, errcode.New(errcode.MissingField, "max_tokens")
	case len(req.Messages) == 0:
		return req, nil, nil, nil, errcode.New(errcode.MissingField, "messages")
	}
	tr := translator{}
	if err := tr.system(req.System); err != nil {
		return req, nil, nil, nil, err
	}
	for i, m := range req.Messages {
		if err := tr.message(i, m); err != nil {
			return req, nil, nil, nil, err
		}
	}
	if err := tr.unanswered(); err != nil {
		return req, nil, nil, nil, err
	}
	fwd, err := forwardFields(&req)
	return req, tr.out, tr.breaks, fwd, err
}

// translator builds the chat messages of an Anthropic request.
type translator struct {
	out    []chat.Message
	breaks []breakpoint
	// calls are the tool_use ids of the previous message (an assistant
	// turn) not yet answered, and callsAt its index: Anthropic's API
	// refuses a tool_use whose tool_result is not in the next message, and
	// a tool_result that answers no tool_use of the previous one.
	calls   []string
	callsAt int
}

// unanswered refuses the previous message's tool_use blocks that the
// message after it did not answer (at the end: that no message answered).
func (t *translator) unanswered() error {
	if len(t.calls) == 0 {
		return nil
	}
	return errcode.New(errcode.BadRequest, "messages[%d]: tool_use %s has no tool_result in the next message; "+
		"each tool_use needs a tool_result block with its id in the user message right after it", t.callsAt, quote(t.calls[0]))
}

func (t *translator) system(raw json.RawMessage) error {
	blocks, err := blocksOf(raw, "system")
	if err != nil || len(blocks) == 0 {
		return err
	}
	var sb strings.Builder
	for i, b := range blocks {
		if b.Type != "text" {
			return errcode.New(errcode.BadRequest, "system[%d]: type %s, want text", i, quote(b.Type))
		}
		sb.WriteString(b.Text)
	}
	t.out = append(t.out, chat.Message{Role: "system", Content: sb.String()})
	return t.breakpoints(blocks, "system")
}

func (t *translator) message(i int, m anthropicMessage) error {
	where := "messages[" + itoa(i) + "]"
	if err := checkRole(m.Role, "user", "assistant"); err != nil {
		return errcode.New(errcode.BadRequest, "%s.role: %v", where, err)
	}
	blocks, err := blocksOf(m.Content, where+".content")
	if err != nil {
		return err
	}
	if m.Role == "assistant" {
		if err := t.unanswered(); err != nil { // the previous turn's calls, answered by no user message
			return err
		}
		err = t.assistant(blocks, where)
		t.calls, t.callsAt = toolUseIDs(blocks), i
	} else {
		err = t.user(blocks, where, t.calls)
		t.calls = nil
	}
	if err != nil {
		return err
	}
	return t.breakpoints(blocks, where+".content")
}

func toolUseIDs(blocks []block) []string {
	var ids []string
	for _, b := range blocks {
		if b.Type == "tool_use" {
			ids = append(ids, b.ID)
		}
	}
	return ids
}

// user emits the tool results first (they answer calls, the tool_use ids
// of the previous assistant turn, each of which they must answer), then
// the text as one user message.
func (t *translator) user(blocks []block, where string, calls []string) error {
	var text strings.Builder
	hasText := false
	open := make(map[string]bool, len(calls))
	for _, id := range calls {
		open[id] = true
	}
	for j, b := range blocks {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			hasText = true
		case "tool_result":
			if !open[b.ToolUseID] {
				return errcode.New(errcode.BadRequest, "%s.content[%d]: tool_result for tool_use_id %s, which the previous message did not call (or another tool_result answered); "+
					"each tool_result answers a tool_use of the assistant message right before it", where, j, quote(b.ToolUseID))
			}
			delete(open, b.ToolUseID)
			c, err := resultText(b.Content)
			if err != nil {
				return errcode.Wrap(errcode.From(err).Code, err, "%s.content[%d].content", where, j)
			}
			if b.IsError {
				c = "[error] " + c
			}
			t.out = append(t.out, chat.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: c})
		default:
			return errcode.New(errcode.NotSupportedYet, "%s.content[%d]: block type %s: the front door forwards text, tool_use, tool_result and thinking", where, j, quote(b.Type))
		}
	}
	if hasText || len(blocks) == 0 {
		t.out = append(t.out, chat.Message{Role: "user", Content: text.String()})
	}
	for _, id := range calls {
		if open[id] {
			return errcode.New(errcode.BadRequest, "%s: no tool_result for tool_use %s of the message before it; "+
				"each tool_use needs a tool_result block with its id in the user message right after it", where, quote(id))
		}
	}
	return nil
}

func (t *translator) assistant(blocks []block, where string) error {
	m := chat.Message{Role: "assistant"}
	var text strings.Builder
	for j, b := range blocks {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "thinking":
			m.ThinkingText += b.Thinking
		case "redacted_thinking":
			// Opaque to any engine but Anthropic's: dropped.
		case "tool_use":
			args := "{}"
			if len(bytes.TrimSpace(b.Input)) > 0 {
				var buf bytes.Buffer
				if err := json.Compact(&buf, b.Input); err != nil {
					return errcode.New(errcode.BadRequest, "%s.content[%d].input: %v", where, j, err)
				}
				args = buf.String()
			}
			m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: b.ID, Type: "function", Function: chat.FunctionCall{Name: b.Name, Arguments: args}})
		default:
			return errcode.New(errcode.NotSupportedYet, "%s.content[%d]: block type %s in an assistant turn", where, j, quote(b.Type))
		}
	}
	m.Content = text.String()
	t.out = append(t.out, m)
	return nil
}

// breakpoints records the cache_control of blocks (at is where they are:
// "system", "messages[3].content"), which now end in the last message
// emitted.
func (t *translator) breakpoints(blocks []block, at string) error {
	for j, b := range blocks {
		cc := b.CacheControl
		if cc == nil {
			continue
		}
		if cc.Type != "ephemeral" {
			return errcode.New(errcode.BadRequest, "%s[%d].cache_control.type %s: the only type is \"ephemeral\"", at, j, quote(cc.Type))
		}
		ttl, err := enginewire.ParseTTL(cc.TTL)
		if err != nil {
			return errcode.Wrap(errcode.InvalidTTL, errcode.From(err).Err, "%s[%d].cache_control.ttl", at, j)
		}
		raw, _ := json.Marshal(cc)
		t.breaks = append(t.breaks, breakpoint{Msg: len(t.out) - 1, TTL: ttl, Raw: raw})
	}
	return nil
}

// blocksOf reads content that is a string or a list of blocks.
func blocksOf(raw json.RawMessage, where string) ([]block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errcode.Wrap(errcode.BadRequest, errcode.FromJSON(err, ""), "%s", where)
		}
		return []block{{Type: "text", Text: s}}, nil
	case '[':
		var bs []block
		if err := json.Unmarshal(raw, &bs); err != nil {
			return nil, errcode.Wrap(errcode.BadRequest, errcode.FromJSON(err, ""), "%s", where)
		}
		return bs, nil
	}
	return nil, errcode.New(errcode.BadRequest, "%s: want a string or a list of content blocks", where)
}

// resultText is a tool_result's content as text.
func resultText(raw json.RawMessage) (string, error) {
	bs, err := blocksOf(raw, "content")
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, b := range bs {
		if b.Type != "text" {
			return "", errcode.New(errcode.NotSupportedYet, "a tool_result block of type %s", quote(b.Type))
		}
		sb.WriteString(b.Text)
	}
	return sb.String(), nil
}

// forwardFields is the OpenAI request the Anthropic one becomes, less its
// messages (forwardBody adds them).
func forwardFields(req *anthropicRequest) (map[string]json.RawMessage, error) {
	fwd := map[string]json.RawMessage{}
	set := func(k string, v any) { fwd[k], _ = json.Marshal(v) }
	set("model", req.Model)
	set("max_tokens", *req.MaxTokens)
	if req.Stream {
		set("stream", true)
		set("stream_options", chatwire.StreamOptions{IncludeUsage: true})
	}
	if len(req.StopSequences) > 0 {
		set("stop", req.StopSequences)
	}
	if req.Temperature != nil {
		set("temperature", *req.Temperature)
	}
	if req.TopP != nil {
		set("top_p", *req.TopP)
	}
	if len(req.Tools) > 0 {
		tools := make([]chatwire.Tool, len(req.Tools))
		for i, t := range req.Tools {
			tools[i].Type = "function"
			tools[i].Function.Name, tools[i].Function.Description, tools[i].Function.Parameters = t.Name, t.Description, t.InputSchema
		}
		set("tools", tools)
	}
	if c := req.ToolChoice; c != nil {
		switch c.Type {
		case "auto", "none":
			set("tool_choice", c.Type)
		case "any":
			set("tool_choice", "required")
		case "tool":
			set("tool_choice", map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		default:
			return nil, errcode.New(errcode.BadRequest, "tool_choice.type %s: want auto, any, tool or none", quote(c.Type))
		}
	}
	return fwd, nil
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeAnthropic(w, badRequest(err))
		return
	}
	req, msgs, breaks, fwd, err := ParseAnthropic(body)
	if err != nil {
		writeAnthropic(w, badRequest(err))
		return
	}
	own, err := req.ContextManagement.rules()
	if err != nil {
		writeAnthropic(w, badRequest(err))
		return
	}
	t, e := s.prepare(r, msgs, own, breaks)
	if e != nil {
		writeAnthropic(w, e)
		return
	}
	b, e := s.forwardBody(fwd, t)
	if e != nil {
		writeAnthropic(w, e)
		return
	}
	s.prefillEdits(r.Context(), t, fwd)
	resp, e := s.up.do(r.Context(), http.MethodPost, "/chat/completions", b)
	if e != nil {
		writeAnthropic(w, e)
		return
	}
	defer resp.Body.Close()
	s.accepted(t)
	w.Header().Set(SessionHeader, t.sess.id)
	if req.Stream {
		s.relayAnthropicStream(w, resp, t, req.Model)
	} else {
		s.relayAnthropic(w, resp, t, req.Model)
	}
	s.pin(r.Context(), t)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
