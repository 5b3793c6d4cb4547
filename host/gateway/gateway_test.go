package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// These tests put a fault-injecting upstream behind the front door: one
// that answers in OpenAI's format, or stalls, refuses, or cuts its stream
// midway, which a healthy engine never does on demand. The front door
// against the real reference engine is tested in examples/refengine and
// sdk/python/tests/test_gateway_*.py.

type fakeUpstream struct {
	mu       sync.Mutex
	mode     string // "ok", "slow", "503", "cut", "404"
	received []chatwire.Request
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req chatwire.Request
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	mode := f.mode
	f.received = append(f.received, req)
	f.mu.Unlock()
	switch mode {
	case "slow":
		time.Sleep(2 * time.Second)
	case "503":
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
		return
	case "404":
		http.Error(w, `{"error":{"message":"The model does not exist"}}`, http.StatusNotFound)
		return
	case "kv400": // another kvpilot's refusal, relayed
		http.Error(w, `{"error":{"message":"bad_request: malformed request: messages[0]: unknown role \"robot\"","type":"invalid_request_error","code":"bad_request"}}`, http.StatusBadRequest)
		return
	case "500":
		http.Error(w, `{"error":{"message":"internal: internal error: engine crashed"}}`, http.StatusInternalServerError)
		return
	case "toolong": // vLLM's answer (a numeric code)
		http.Error(w, `{"error":{"message":"This model's maximum context length is 1024 tokens. However, your prompt contains 5000 input tokens","type":"BadRequestError","param":"input_tokens","code":400}}`, http.StatusBadRequest)
		return
	case "toolong-ref": // the reference engine's (OpenAI's code)
		http.Error(w, `{"error":{"message":"prompt_too_long: prompt too long for the engine: 5000 tokens with the answer; this engine holds 1024","type":"invalid_request_error","code":"context_length_exceeded"}}`, http.StatusBadRequest)
		return
	}
	stop := "stop"
	text := "hello"
	if !req.Stream {
		writeJSON(w, 200, chatwire.Response{ID: "x", Object: "chat.completion", Choices: []chatwire.Choice{{Message: &chat.Message{Role: "assistant", Content: "hello"}, FinishReason: &stop}},
			Usage: &chatwire.Usage{PromptTokens: 10, CompletionTokens: 2, PromptTokensDetails: &chatwire.PromptTokensDetails{CachedTokens: 4}}})
		return
	}
	sw := startSSE(w)
	b, _ := json.Marshal(chatwire.Response{ID: "x", Object: "chat.completion.chunk", Choices: []chatwire.Choice{{Delta: &chatwire.Delta{Content: &text}}}})
	sw.send("", b)
	if mode == "error" {
		sw.send("", []byte(`{"error":{"message":"engine died","type":"server_error","code":500}}`))
		return
	}
	if mode == "cut" {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	b, _ = json.Marshal(chatwire.Response{ID: "x", Object: "chat.completion.chunk", Choices: []chatwire.Choice{{Delta: &chatwire.Delta{}, FinishReason: &stop}}})
	sw.send("", b)
	sw.send("", []byte("[DONE]"))
}

func (f *fakeUpstream) set(mode string) { f.mu.Lock(); f.mode = mode; f.mu.Unlock() }

func startGateway(t *testing.T, up http.Handler, rules Rules) (*Server, string) {
	t.Helper()
	base := "http://127.0.0.1:1" // nothing listens on port 1: a dead upstream
	if up != nil {
		us := httptest.NewServer(up)
		t.Cleanup(us.Close)
		base = us.URL
	}
	g := New(Config{Upstream: base + "/v1", Timeout: 300 * time.Millisecond, Policy: rules}, nil)
	gs := httptest.NewServer(g.Handler())
	t.Cleanup(gs.Close)
	return g, gs.URL
}

func post(t *testing.T, url, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

const (
	oaBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	anBody = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
)

// Each failure answers in the API's own error shape and status.
func TestErrorShapes(t *testing.T) {
	up := &fakeUpstream{}
	_, url := startGateway(t, up, Rules{})
	_, deadURL := startGateway(t, nil, Rules{})
	for _, tc := range []struct {
		name, mode, url, path, body string
		status                      int
		kind                        string // OpenAI error.type, or Anthropic error.type
	}{
		{"openai malformed", "ok", url, "/v1/chat/completions", `{"model":`, 400, "invalid_request_error"},
		{"anthropic malformed", "ok", url, "/v1/messages", `{"model":`, 400, "invalid_request_error"},
		{"anthropic no max_tokens", "ok", url, "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{"openai bad role", "ok", url, "/v1/chat/completions", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, 400, "invalid_request_error"},
		{"openai unknown model", "404", url, "/v1/chat/completions", oaBody, 404, "invalid_request_error"},
		{"anthropic unknown model", "404", url, "/v1/messages", anBody, 404, "not_found_error"},
		{"openai upstream down", "ok", deadURL, "/v1/chat/completions", oaBody, 502, "server_error"},
		{"anthropic upstream down", "ok", deadURL, "/v1/messages", anBody, 502, "api_error"},
		{"openai upstream overloaded", "503", url, "/v1/chat/completions", oaBody, 503, "server_error"},
		{"anthropic upstream overloaded", "503", url, "/v1/messages", anBody, 529, "overloaded_error"},
		{"openai upstream slow", "slow", url, "/v1/chat/completions", oaBody, 504, "server_error"},
		{"anthropic upstream slow", "slow", url, "/v1/messages", anBody, 504, "timeout_error"},
		{"anthropic image block", "ok", url, "/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "invalid_request_error"},
		{"anthropic unknown edit", "ok", url, "/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"}],"context_management":{"edits":[{"type":"compact_20260112"}]}}`, 400, "invalid_request_error"},
		{"openai prompt too long", "toolong", url, "/v1/chat/completions", oaBody, 400, "invalid_request_error"},
		{"anthropic prompt too long", "toolong", url, "/v1/messages", anBody, 400, "invalid_request_error"},
		{"openai prompt too long (reference engine)", "toolong-ref", url, "/v1/chat/completions", oaBody, 400, "invalid_request_error"},
		{"anthropic prompt too long (reference engine)", "toolong-ref", url, "/v1/messages", anBody, 400, "invalid_request_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up.set(tc.mode)
			status, b := post(t, tc.url+tc.path, tc.body)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type, Message, Code, Hint string
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d %s: %v", status, b, err)
			}
			if status != tc.status || e.Error.Type != tc.kind || e.Error.Message == "" || e.Error.Hint == "" || e.Error.Code == "" {
				t.Fatalf("got %d %s", status, b)
			}
			if strings.HasPrefix(tc.path, "/v1/messages") && e.Type != "error" {
				t.Fatalf("Anthropic errors are {type: error, error: {...}}; got %s", b)
			}
		})
	}
}

// A stream cut midway ends with an error event in the API's own format.
func TestStreamCutMidway(t *testing.T) {
	up := &fakeUpstream{mode: "cut"}
	_, url := startGateway(t, up, Rules{})
	_, b := post(t, url+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !bytes.Contains(b, []byte(`"content":"hello"`)) || !bytes.Contains(b, []byte(`data: {"error":`)) || bytes.Contains(b, []byte("data: [DONE]")) {
		t.Fatalf("OpenAI stream:\n%s", b)
	}
	_, b = post(t, url+"/v1/messages", `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !bytes.Contains(b, []byte("event: message_start")) || !bytes.Contains(b, []byte("event: error\ndata: {\"type\":\"error\"")) ||
		bytes.Contains(b, []byte("message_stop")) {
		t.Fatalf("Anthropic stream:\n%s", b)
	}
	up.set("error") // an engine's own error event midway
	_, b = post(t, url+"/v1/messages", `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !bytes.Contains(b, []byte("event: error")) || !bytes.Contains(b, []byte("engine died")) || bytes.Contains(b, []byte("message_stop")) {
		t.Fatalf("Anthropic stream after an engine error:\n%s", b)
	}
}

// A dead upstream never loses a session's state: the clears decided before
// stay, and once the upstream is back the request carries them.
func TestDeadUpstreamKeepsTheSession(t *testing.T) {
	up := &fakeUpstream{mode: "ok"}
	g, url := startGateway(t, up, Rules{Tools: toolRule(10, 1)})
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(3)})
	if status, b := post(t, url+"/v1/chat/completions", string(body), SessionHeader, "s"); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	before := g.sessions.snapshot("", "s")
	if len(before.sticky) != 2 {
		t.Fatalf("%d clears", len(before.sticky))
	}
	up.set("503")
	longer, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(4)})
	if status, _ := post(t, url+"/v1/chat/completions", string(longer), SessionHeader, "s"); status != 503 {
		t.Fatalf("status %d", status)
	}
	if after := g.sessions.snapshot("", "s"); len(after.sticky) != 2 || len(after.history) != len(before.history) {
		t.Fatalf("a failed request changed the session: %d clears, %d messages", len(after.sticky), len(after.history))
	}
	up.set("ok")
	if status, _ := post(t, url+"/v1/chat/completions", string(longer), SessionHeader, "s"); status != 200 {
		t.Fatalf("status %d", status)
	}
	got := up.received[len(up.received)-1]
	if p := placeholders(got.Messages); len(p) != 3 || p[0] != 3 {
		t.Fatalf("upstream got placeholders at %v", p)
	}
}

// Without a session header, conversations are named by their opening; one
// that diverges from the stored history moves to a child session, so two
// conversations with the same opening keep their own state.
func TestSessionsByOpeningAndForks(t *testing.T) {
	s := newStore(100)
	a := conversation(3)
	sa := s.resolve("t", "", a)
	s.save(sa)
	if again := s.resolve("t", "", conversation(4)); again.id != sa.id {
		t.Fatalf("an extension moved to %s from %s", again.id, sa.id)
	}
	b := append(append([]chat.Message(nil), a[:3]...), chat.Message{Role: "tool", ToolCallID: "call_a", Content: "other"})
	sb := s.resolve("t", "", b)
	if sb.id == sa.id || !strings.HasPrefix(sb.id, sa.id+".") {
		t.Fatalf("a fork got %s (parent %s)", sb.id, sa.id)
	}
	s.save(sb)
	if s.resolve("t", "", a).id != sa.id || s.resolve("t", "", b).id != sb.id {
		t.Fatal("the two branches do not keep their sessions")
	}
	if s.resolve("u", "", a).id == sa.id {
		t.Fatal("another tenant shares the session")
	}
	if r := s.resolve("t", "", a[:2]); r.id == sa.id {
		t.Fatal("a rewind reuses the longer history's session")
	}
	if named := s.resolve("t", "mine", b); named.id != "mine" {
		t.Fatalf("a named session resolved to %s", named.id)
	}
	small := newStore(2)
	for i := 0; i < 5; i++ {
		small.save(session{key: fmt.Sprint(i)})
	}
	if small.Len() != 2 {
		t.Fatalf("%d sessions kept, bound 2", small.Len())
	}
}

func TestTenantBinding(t *testing.T) {
	b := binding{header: "x-kvpilot-tenant", keys: map[string][]string{"k1": {"acme"}, "k2": {"a", "b"}, "root": {"*"}}}
	for _, tc := range []struct {
		key, tenant string
		named       bool
		want        string
		ok          bool
	}{
		{"k1", "", false, "acme", true},
		{"k1", "acme", true, "acme", true},
		{"k1", "other", true, "", false},
		{"k2", "", false, "", false},
		{"k2", "b", true, "b", true},
		{"root", "any", true, "any", true},
		{"nope", "acme", true, "", false},
		{"", "acme", true, "", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if tc.key != "" {
			r.Header.Set("Authorization", "Bearer "+tc.key)
		}
		if tc.named {
			r.Header.Set("x-kvpilot-tenant", tc.tenant)
		}
		got, err := b.tenant(r)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("key %q tenant %q: got %q, %v", tc.key, tc.tenant, got, err)
		}
	}
	open := binding{header: "x-kvpilot-tenant"}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("x-kvpilot-tenant", "t1")
	if got, err := open.tenant(r); err != nil || got != "t1" {
		t.Fatalf("unbound: %q %v", got, err)
	}
}

// Connector mode (no tokenizer in the host): the session, the tenant and
// the longest-lived cache_control breakpoint reach the engine in
// kv_transfer_params["kvpilot"], the object the vLLM connector reads;
// other connectors' keys are kept.
func TestKVTransferParamsForTheConnector(t *testing.T) {
	up := &fakeUpstream{mode: "ok"}
	_, url := startGateway(t, up, Rules{})
	body := `{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`
	if status, b := post(t, url+"/v1/messages", body, SessionHeader, "chat-42", "x-kvpilot-tenant", "acme"); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	got := up.received[len(up.received)-1]
	kv, err := chatwire.ReadKVParams(got.KVTransferParams)
	if err != nil || kv.Session != "chat-42" || kv.Tenant != "acme" || string(kv.CacheControl) != `{"type":"ephemeral","ttl":"1h"}` {
		t.Fatalf("kv_transfer_params %s: %+v %v", got.KVTransferParams, kv, err)
	}
	oa := `{"model":"m","messages":[{"role":"user","content":"hi"}],"kv_transfer_params":{"other":{"x":1}}}`
	if status, b := post(t, url+"/v1/chat/completions", oa); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	got = up.received[len(up.received)-1]
	var all map[string]json.RawMessage
	if err := json.Unmarshal(got.KVTransferParams, &all); err != nil || string(all["other"]) != `{"x":1}` || all["kvpilot"] == nil {
		t.Fatalf("kv_transfer_params %s", got.KVTransferParams)
	}
	if kv, _ := chatwire.ReadKVParams(got.KVTransferParams); !strings.HasPrefix(kv.Session, "gw-") {
		t.Fatalf("an unnamed session is %q, want the opening's hash", kv.Session)
	}
}

// With gateway.tenants set, a request's API key must be bound to its
// tenant: a refusal is 403 in each API's shape, and the upstream never
// sees the request.
func TestTenantRefusalShapes(t *testing.T) {
	up := &fakeUpstream{mode: "ok"}
	us := httptest.NewServer(up)
	defer us.Close()
	g := New(Config{Upstream: us.URL + "/v1", Tenants: map[string][]string{"k1": {"acme"}}}, nil)
	gs := httptest.NewServer(g.Handler())
	defer gs.Close()
	status, b := post(t, gs.URL+"/v1/chat/completions", oaBody, "Authorization", "Bearer k1", "x-kvpilot-tenant", "other")
	if status != 403 || !bytes.Contains(b, []byte(`"code":"permission_denied"`)) || !bytes.Contains(b, []byte(`"type":"permission_error"`)) {
		t.Fatalf("OpenAI: %d %s", status, b)
	}
	status, b = post(t, gs.URL+"/v1/messages", anBody, "x-api-key", "nope")
	if status != 403 || !bytes.Contains(b, []byte(`"type":"permission_error"`)) {
		t.Fatalf("Anthropic: %d %s", status, b)
	}
	if len(up.received) != 0 {
		t.Fatalf("the upstream got %d refused requests", len(up.received))
	}
	if status, b := post(t, gs.URL+"/v1/messages", anBody, "x-api-key", "k1"); status != 200 {
		t.Fatalf("a bound key: %d %s", status, b)
	}
	if kv, _ := chatwire.ReadKVParams(up.received[0].KVTransferParams); kv.Tenant != "acme" {
		t.Fatalf("tenant %q, want the key's only tenant", kv.Tenant)
	}
}

// A prompt longer than the engine's context is the client's to fix: 400
// in both APIs (SDKs retry a 5xx), with OpenAI's context_length_exceeded
// code whether the engine names it so or says it as vLLM does.
func TestPromptTooLongIs400(t *testing.T) {
	for mode, says := range map[string]string{"toolong-ref": "5000 tokens", "toolong": "This model's maximum context length is 1024"} {
		up := &fakeUpstream{mode: mode}
		_, url := startGateway(t, up, Rules{})
		status, b := post(t, url+"/v1/chat/completions", oaBody)
		var e chatwire.ErrorBody
		if err := json.Unmarshal(b, &e); err != nil || status != 400 || e.Error.Code != "context_length_exceeded" ||
			!strings.HasPrefix(e.Error.Message, "prompt_too_long: prompt too long for the engine: upstream: "+says) {
			t.Fatalf("%s: %d %s", mode, status, b)
		}
		status, b = post(t, url+"/v1/messages", anBody)
		var ae struct {
			Error struct{ Type, Message string } `json:"error"`
		}
		if err := json.Unmarshal(b, &ae); err != nil || status != 400 || ae.Error.Type != "invalid_request_error" ||
			!strings.Contains(ae.Error.Message, "prompt too long") {
			t.Fatalf("%s, Anthropic: %d %s", mode, status, b)
		}
	}
}

// Tool blocks that do not pair up are refused with 400 in each API's
// shape, as both APIs do: Anthropic's tool_result must answer a tool_use of
// the message right before it, and each tool_use needs its tool_result in
// the next message; an OpenAI tool message must answer a preceding
// assistant message's tool_calls, each of which needs one.
func TestUnpairedToolBlocksAre400(t *testing.T) {
	up := &fakeUpstream{mode: "ok"}
	_, url := startGateway(t, up, Rules{})
	const (
		use    = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}]}`
		result = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}`
		other  = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"ok"}]}`
		call   = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{}"}}]}`
		answer = `{"role":"tool","tool_call_id":"call_1","content":"ok"}`
	)
	an := func(msgs ...string) string {
		return `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"go"},` + strings.Join(msgs, ",") + `]}`
	}
	oa := func(msgs ...string) string {
		return `{"model":"m","messages":[{"role":"user","content":"go"},` + strings.Join(msgs, ",") + `]}`
	}
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"anthropic tool_result of an unknown id", "/v1/messages", an(use, other), `messages[2].content[0]: tool_result for tool_use_id "toolu_9"`},
		{"anthropic tool_result after no tool_use", "/v1/messages", an(`{"role":"assistant","content":"hm"}`, result), `messages[2].content[0]: tool_result for tool_use_id "toolu_1"`},
		{"anthropic tool_use with no tool_result", "/v1/messages", an(use, `{"role":"user","content":"and?"}`), `messages[2]: no tool_result for tool_use "toolu_1"`},
		{"anthropic tool_use last", "/v1/messages", an(use), `messages[1]: tool_use "toolu_1" has no tool_result`},
		{"anthropic tool_use then assistant", "/v1/messages", an(use, `{"role":"assistant","content":"x"}`), `messages[1]: tool_use "toolu_1" has no tool_result`},
		{"openai tool with no tool_calls", "/v1/chat/completions", oa(answer), `messages[1]: a tool message must answer the tool_calls`},
		{"openai tool of an unknown id", "/v1/chat/completions", oa(call, `{"role":"tool","tool_call_id":"call_9","content":"ok"}`), `messages[2].tool_call_id "call_9"`},
		{"openai tool answered twice", "/v1/chat/completions", oa(call, answer, answer), `messages[3].tool_call_id "call_1"`},
		{"openai tool_calls with no answer", "/v1/chat/completions", oa(call, `{"role":"user","content":"and?"}`), `messages[1].tool_calls: the call "call_1" has no tool message`},
		{"openai tool_calls last", "/v1/chat/completions", oa(call), `messages[1].tool_calls: the call "call_1" has no tool message`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := post(t, url+tc.path, tc.body)
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message, Code string }
			}
			if err := json.Unmarshal(b, &e); err != nil || status != 400 || e.Error.Type != "invalid_request_error" || e.Error.Code != "bad_request" ||
				!strings.Contains(e.Error.Message, tc.want) {
				t.Fatalf("%d %s; want 400 and %q", status, b, tc.want)
			}
		})
	}
	// Paired, both pass.
	if status, b := post(t, url+"/v1/messages", an(use, result)); status != 200 {
		t.Fatalf("anthropic paired: %d %s", status, b)
	}
	if status, b := post(t, url+"/v1/chat/completions", oa(call, answer)); status != 200 {
		t.Fatalf("openai paired: %d %s", status, b)
	}
}
