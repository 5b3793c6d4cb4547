package refengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/chunktok"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// ServerOptions configure the engine's OpenAI-compatible HTTP server.
type ServerOptions struct {
	// ModelName is the one model it serves (GET /v1/models); a request
	// naming another is answered 404 model_not_found.
	ModelName string
	// TimeScale, when positive, makes the server wait the modelled time to
	// first token times TimeScale before it answers, so a client measures
	// prefill cost through HTTP. 0 answers at once.
	TimeScale float64
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64
}

// Server serves POST /v1/chat/completions and GET /v1/models over the
// engine: the messages are rendered with chatwire's reference template
// and chunk4 tokens, run as one engine request (match, allocate, commit,
// finish), and the answer is a deterministic function of the prompt. The
// session, tenant and cache_control come from kv_transfer_params.kvpilot,
// as the vLLM connector reads them. The usage reports prompt tokens, cached
// tokens (prompt_tokens_details.cached_tokens) and, under "kvpilot", the
// tokens prefilled and the modelled TTFT.
type Server struct {
	e *Engine
	o ServerOptions
}

// NewServer returns the HTTP server of e.
func NewServer(e *Engine, o ServerOptions) *Server {
	if o.ModelName == "" {
		o.ModelName = e.cfg.Model.Name
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 32 << 20
	}
	return &Server{e: e, o: o}
}

// Handler routes the server's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	mux.HandleFunc("GET /v1/models", s.models)
	return mux
}

// Stats is kvpilot's extension of a response: what the turn cost.
type Stats struct {
	PromptTokens    int     `json:"prompt_tokens"`
	CachedTokens    int     `json:"cached_tokens"`
	PrefilledTokens int     `json:"prefilled_tokens"`
	TTFTms          float64 `json:"ttft_ms"`
	CheckedRows     int     `json:"checked_rows"`
	Session         string  `json:"session,omitempty"`
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, chatwire.ModelList{Object: "list",
		Data: []chatwire.Model{{ID: s.o.ModelName, Object: "model", OwnedBy: "kvpilot-refengine"}}})
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req chatwire.Request
	body := http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes)
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", errcode.Wrap(errcode.BadRequest, err, "request body"))
		return
	}
	if req.Model != s.o.ModelName {
		s.fail(w, http.StatusNotFound, "invalid_request_error", errcode.New(errcode.BadRequest,
			"model %q does not exist; this engine serves %q", req.Model, s.o.ModelName))
		return
	}
	if len(req.Messages) == 0 {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", errcode.New(errcode.MissingField, "messages"))
		return
	}
	kv, err := chatwire.ReadKVParams(req.KVTransferParams)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", err)
		return
	}
	answer, finish := s.answer(&req)
	st, err := s.run(r.Context(), &req, kv, answer)
	if err != nil {
		// A request the host or the engine refused as malformed or invalid
		// (a prompt too long among them) is the client's to fix: 400, which
		// SDKs do not retry. Anything else is this server's failure.
		if n := errcode.From(err).Entry().Number / 1000; n == 1 || n == 2 {
			s.fail(w, http.StatusBadRequest, "invalid_request_error", err)
			return
		}
		s.fail(w, http.StatusInternalServerError, "server_error", err)
		return
	}
	if s.o.TimeScale > 0 {
		time.Sleep(time.Duration(st.TTFTms * s.o.TimeScale * float64(time.Millisecond)))
	}
	out := chunktok.Tokenize(answer.Content + argsText(answer))
	usage := chatwire.Usage{PromptTokens: st.PromptTokens, CompletionTokens: len(out), TotalTokens: st.PromptTokens + len(out),
		PromptTokensDetails: &chatwire.PromptTokensDetails{CachedTokens: st.CachedTokens}}
	ext, _ := json.Marshal(st)
	id := fmt.Sprintf("chatcmpl-ref-%x", fnvOf(answer.Content+fmt.Sprint(time.Now().UnixNano())))
	if req.Stream {
		s.stream(w, &req, id, answer, finish, usage, ext)
		return
	}
	writeJSON(w, http.StatusOK, chatwire.Response{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.o.ModelName,
		Choices: []chatwire.Choice{{Message: &answer, FinishReason: &finish}}, Usage: &usage, KVPilot: ext})
}

// run renders the prompt and the answer and runs them as one engine turn.
func (s *Server) run(ctx context.Context, req *chatwire.Request, kv chatwire.KVParams, answer chat.Message) (Stats, error) {
	toks, msgs := chatwire.Render(req.Messages, chunktok.Tokenize)
	for i, m := range msgs {
		if len(m.ToolCalls) > 0 {
			msgs[i].ToolName = m.ToolCalls[0].Function.Name // the engine protocol names one call
		}
	}
	tr := TurnRequest{Session: kv.Session, Tenant: kv.Tenant, Tokens: toks, Output: chatwire.RenderOne(answer, chunktok.Tokenize), Messages: msgs}
	if len(kv.CacheControl) > 0 {
		tr.CacheControlJSON = `{"cache_control":` + string(kv.CacheControl) + `}`
	}
	ts, err := s.e.Run(ctx, tr)
	if err != nil {
		return Stats{}, err
	}
	return Stats{PromptTokens: ts.Prompt, CachedTokens: ts.Cached, PrefilledTokens: ts.Prefilled, TTFTms: ts.TTFTms,
		CheckedRows: ts.CheckedRows, Session: kv.Session}, nil
}

// answer is the deterministic reply: a tool call when the request requires
// one (tool_choice "required" or a named function), else a short text that
// depends on the last message, cut to the request's max tokens.
func (s *Server) answer(req *chatwire.Request) (chat.Message, string) {
	last := req.Messages[len(req.Messages)-1]
	if name := requiredTool(req); name != "" {
		args, _ := json.Marshal(map[string]string{"about": clipText(last.Content, 40)})
		return chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: fmt.Sprintf("call_%08x", fnvOf(last.Content)),
			Type: "function", Function: chat.FunctionCall{Name: name, Arguments: string(args)}}}}, "tool_calls"
	}
	text := fmt.Sprintf("Reference answer %08x to a %s message of %d characters.", fnvOf(chatwire.Text(last)), last.Role, len(last.Content))
	if n := req.Limit(); n > 0 && 4*n < len(text) {
		return chat.Message{Role: "assistant", Content: text[:4*n]}, "length"
	}
	return chat.Message{Role: "assistant", Content: text}, "stop"
}

func requiredTool(req *chatwire.Request) string {
	if len(req.Tools) == 0 || len(req.ToolChoice) == 0 {
		return ""
	}
	var choice any
	if json.Unmarshal(req.ToolChoice, &choice) != nil {
		return ""
	}
	switch c := choice.(type) {
	case string:
		if c == "required" {
			return req.Tools[0].Function.Name
		}
	case map[string]any:
		if f, ok := c["function"].(map[string]any); ok {
			if n, ok := f["name"].(string); ok {
				return n
			}
		}
	}
	return ""
}

func argsText(m chat.Message) string {
	var b strings.Builder
	for _, c := range m.ToolCalls {
		b.WriteString(c.Function.Arguments)
	}
	return b.String()
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func fnvOf(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// fail answers in OpenAI's error shape with the registry's code and hint.
func (s *Server) fail(w http.ResponseWriter, status int, typ string, err error) {
	e := errcode.From(err)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status, e = http.StatusRequestEntityTooLarge, errcode.Wrap(errcode.PayloadTooLarge, err, "request body over %d bytes", s.o.MaxBodyBytes)
	}
	code := string(e.Code)
	switch {
	case status == http.StatusNotFound:
		code = "model_not_found"
	case e.Code == errcode.PromptTooLong:
		code = "context_length_exceeded" // OpenAI's code for it
	}
	writeJSON(w, status, chatwire.ErrorBody{Error: chatwire.ErrorDetail{Message: e.Error(), Type: typ, Code: code, Hint: e.Entry().Hint}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
