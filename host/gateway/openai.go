package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// openAIRequest is what the front door reads of a chat completions
// request; every other field is forwarded as it came. context_management
// is kvpilot's extension: Anthropic's edits, in an OpenAI request.
type openAIRequest struct {
	Messages          []chat.Message     `json:"messages"`
	Stream            bool               `json:"stream"`
	ContextManagement *contextManagement `json:"context_management"`
}

// ParseOpenAI reads a chat completions request body: the typed fields the
// front door uses and the raw fields it forwards.
func ParseOpenAI(body []byte) (openAIRequest, map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return openAIRequest{}, nil, errcode.FromJSON(err, "request body")
	}
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return openAIRequest{}, nil, errcode.FromJSON(err, "chat completions request")
	}
	if _, ok := raw["model"]; !ok {
		return openAIRequest{}, nil, errcode.New(errcode.MissingField, "model")
	}
	for i, m := range req.Messages {
		if err := checkRole(m.Role, "system", "developer", "user", "assistant", "tool"); err != nil {
			return openAIRequest{}, nil, errcode.New(errcode.BadRequest, "messages[%d].role: %v", i, err)
		}
	}
	if err := checkToolPairs(req.Messages); err != nil {
		return openAIRequest{}, nil, err
	}
	return req, raw, nil
}

// checkToolPairs holds a chat history to OpenAI's pairing of tool calls
// and tool messages, which OpenAI's API refuses with 400 when broken (and
// an engine would template into a prompt the model never saw in
// training): every tool message answers a call of the assistant message
// before its run of tool messages, and every call is answered there.
func checkToolPairs(msgs []chat.Message) error {
	var open map[string]bool // the calls of the assistant message being answered
	at := -1                 // that message's index
	unanswered := func() error {
		for _, c := range msgs[at].ToolCalls {
			if open[c.ID] {
				return errcode.New(errcode.BadRequest, "messages[%d].tool_calls: the call %s has no tool message answering it; "+
					"each tool call needs a tool message with its tool_call_id after the assistant message", at, quote(c.ID))
			}
		}
		return nil
	}
	for i, m := range msgs {
		if m.Role == "tool" {
			switch {
			case open == nil:
				return errcode.New(errcode.BadRequest, "messages[%d]: a tool message must answer the tool_calls of an assistant message before it; none precedes it", i)
			case !open[m.ToolCallID]:
				return errcode.New(errcode.BadRequest, "messages[%d].tool_call_id %s: the assistant message before it made no open call of that id", i, quote(m.ToolCallID))
			}
			delete(open, m.ToolCallID)
			continue
		}
		if open != nil {
			if err := unanswered(); err != nil {
				return err
			}
			open = nil
		}
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			open, at = make(map[string]bool, len(m.ToolCalls)), i
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		}
	}
	if open != nil {
		return unanswered()
	}
	return nil
}

func (s *Server) openAI(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeOpenAI(w, badRequest(err))
		return
	}
	req, raw, err := ParseOpenAI(body)
	if err != nil {
		writeOpenAI(w, badRequest(err))
		return
	}
	own, err := req.ContextManagement.rules()
	if err != nil {
		writeOpenAI(w, badRequest(err))
		return
	}
	breaks, err := openAIBreakpoints(raw, len(req.Messages))
	if err != nil {
		writeOpenAI(w, badRequest(err))
		return
	}
	t, e := s.prepare(r, req.Messages, own, breaks)
	if e != nil {
		writeOpenAI(w, e)
		return
	}
	fwd, e := s.forwardBody(raw, t)
	if e != nil {
		writeOpenAI(w, e)
		return
	}
	s.prefillEdits(r.Context(), t, raw)
	resp, e := s.up.do(r.Context(), http.MethodPost, "/chat/completions", fwd)
	if e != nil {
		writeOpenAI(w, e)
		return
	}
	defer resp.Body.Close()
	s.accepted(t)
	w.Header().Set(SessionHeader, t.sess.id)
	if req.Stream {
		s.relayOpenAIStream(w, resp, t)
	} else {
		s.relayOpenAI(w, resp, t)
	}
	s.pin(r.Context(), t)
}

// relayOpenAI adds context_management to the upstream's completion.
func (s *Server) relayOpenAI(w http.ResponseWriter, resp *http.Response, t *turn) {
	var out map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&out); err != nil {
		writeOpenAI(w, &apiError{status: http.StatusBadGateway, err: errcode.Wrap(errcode.Unavailable, err, "upstream sent an unreadable completion")})
		return
	}
	var u struct {
		Usage *chatwire.Usage `json:"usage"`
	}
	if raw, ok := out["usage"]; ok && json.Unmarshal(raw, &u.Usage) == nil {
		s.noteUsage(t, u.Usage)
	}
	out["context_management"], _ = json.Marshal(t.report())
	writeJSON(w, http.StatusOK, out)
}

// relayOpenAIStream passes the upstream's events through, adds
// context_management to the first chunk, and ends a stream cut midway with
// an error event in OpenAI's shape (its SDKs raise it).
func (s *Server) relayOpenAIStream(w http.ResponseWriter, resp *http.Response, t *turn) {
	sw := startSSE(w)
	rd := newSSEReader(resp.Body)
	first := true
	for {
		ev, err := rd.next()
		if err != nil {
			cut := err
			if errors.Is(err, io.EOF) {
				cut = io.ErrUnexpectedEOF
			}
			s.cfg.Log.Warn("upstream stream cut", "session", t.sess.id, "error", cut)
			b, _ := json.Marshal(chatwire.ErrorBody{Error: chatwire.ErrorDetail{Type: "server_error", Code: string(errcode.Unavailable),
				Message: errcode.Wrap(errcode.Unavailable, cut, "the upstream stream ended before [DONE]").Error(),
				Hint:    "retry the request; the session's edits are kept"}})
			sw.send("", b)
			return
		}
		if ev.data == "[DONE]" {
			sw.send("", []byte(ev.data))
			return
		}
		if first {
			if b, ok := withField(ev.data, "context_management", t.report()); ok {
				ev.data, first = string(b), false
			}
		}
		if strings.Contains(ev.data, `"usage"`) {
			var c chatwire.Response
			if json.Unmarshal([]byte(ev.data), &c) == nil {
				s.noteUsage(t, c.Usage)
			}
		}
		sw.send(ev.name, []byte(ev.data))
	}
}

// withField adds a field to a JSON object.
func withField(data, key string, v any) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(data), &m) != nil || m == nil {
		return nil, false
	}
	m[key], _ = json.Marshal(v)
	b, err := json.Marshal(m)
	return b, err == nil
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errcode.Wrap(errcode.PayloadTooLarge, err, "request body over %d bytes", limit)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.BadRequest, err, "read request body")
	}
	return b, nil
}

func checkRole(role string, allowed ...string) error {
	for _, a := range allowed {
		if role == a {
			return nil
		}
	}
	return errors.New("unknown role " + quote(role))
}

func quote(s string) string {
	b, _ := json.Marshal(clipName(s))
	return string(b)
}
