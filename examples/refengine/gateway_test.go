package refengine_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/chunktok"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// These tests drive kvpilot's front door (host/gateway, in a host built by
// daemon.New) over HTTP, through to the reference engine's HTTP server,
// which registers with the same host: the edits reach the engine as edited
// messages, the host's session diff splices the cache, and the engine's
// contract check runs on every cached row of every request.

// recorder keeps the bodies the upstream received.
type recorder struct {
	h      http.Handler
	mu     sync.Mutex
	bodies [][]byte
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(b))
	r.h.ServeHTTP(w, req)
}

func (r *recorder) last(t *testing.T) chatwire.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var req chatwire.Request
	if err := json.Unmarshal(r.bodies[len(r.bodies)-1], &req); err != nil {
		t.Fatal(err)
	}
	return req
}

type frontDoor struct {
	d     *daemon.Daemon
	url   string
	up    *recorder
	fills *refengine.FillServer
}

// startFrontDoor runs a host with auto_splice and the front door on, and
// the reference engine's HTTP server as its upstream.
func startFrontDoor(t *testing.T, mod func(*config.Config), opts ...daemon.Option) *frontDoor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, c := startDaemon(t, func(c *config.Config) {
		c.Index.AutoSplice = true
		c.Gateway.Listen = "127.0.0.1:0"
		c.Gateway.Upstream = "http://" + ln.Addr().String() + "/v1"
		if mod != nil {
			mod(c)
		}
	}, opts...)
	e, fills := engineWithFills(t, c.EngineSocket(), refengine.GQA(hostPage))
	rec := &recorder{h: refengine.NewServer(e, refengine.ServerOptions{}).Handler()}
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &frontDoor{d: d, url: "http://" + d.GatewayAddr(), up: rec, fills: fills}
}

// post sends a JSON body and decodes the answer into out.
func (f *frontDoor) post(t *testing.T, path string, hdr map[string]string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			t.Fatalf("%s answered %d: %s: %v", path, resp.StatusCode, rb, err)
		}
	}
	return resp.StatusCode
}

type completion struct {
	chatwire.Response
	ContextManagement struct {
		AppliedEdits []struct {
			Type               string `json:"type"`
			ClearedToolUses    int    `json:"cleared_tool_uses"`
			ClearedInputTokens int    `json:"cleared_input_tokens"`
		} `json:"applied_edits"`
	} `json:"context_management"`
	Stats refengine.Stats `json:"-"`
}

// toolOutput is a long, distinct tool result.
func toolOutput(i int) string {
	return strings.Repeat(fmt.Sprintf("line %d of the output of call %d: drwxr-xr-x root some-directory\n", i, i), 12)
}

// A harness resends its whole history through the front door; the
// request's clear_tool_uses edit (trigger 900, keep 1) clears old tool
// results once the context passes the trigger. The upstream receives the
// placeholders, every later turn carries them, and the turn after each new
// edit prefills only its new messages (and a page or two): the host
// spliced the cache, or the edit sat so close to the end that re-prefilling
// its tail was cheaper. By default each turn follows the documented rule
// (once triggered, exactly keep results stay intact); with
// gateway.sticky_clears, clears come in batches the host splices.
func TestGatewayEditsReachTheEngineAndTheCache(t *testing.T) {
	t.Run("documented rule", func(t *testing.T) { gatewayEdits(t, false) })
	t.Run("sticky clears", func(t *testing.T) { gatewayEdits(t, true) })
}

func gatewayEdits(t *testing.T, sticky bool) {
	f := startFrontDoor(t, func(c *config.Config) { c.Gateway.StickyClears = sticky })
	msgs := []chat.Message{
		{Role: "system", Content: "You are a coding agent with a bash tool. Keep answers short."},
		{Role: "user", Content: "Look around the repository, one command at a time."},
	}
	tools := json.RawMessage(`[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]`)
	cm := map[string]any{"edits": []map[string]any{{"type": "clear_tool_uses_20250919",
		"trigger": map[string]any{"type": "input_tokens", "value": 900}, "keep": map[string]any{"type": "tool_uses", "value": 1}}}}
	hdr := map[string]string{"x-kvpilot-session": "agent-1", "x-kvpilot-tenant": "acme"}
	var prevCleared, edits int
	for turn := 0; turn < 8; turn++ {
		var c completion
		var ext refengine.Stats
		body := map[string]any{"model": "ref-gqa", "messages": msgs, "tools": tools, "tool_choice": "required", "context_management": cm}
		if code := f.post(t, "/v1/chat/completions", hdr, body, &c); code != http.StatusOK {
			t.Fatalf("turn %d: status %d", turn, code)
		}
		if err := json.Unmarshal(c.KVPilot, &ext); err != nil {
			t.Fatal(err)
		}
		cleared := 0
		for _, a := range c.ContextManagement.AppliedEdits {
			cleared += a.ClearedToolUses
		}
		up := f.up.last(t)
		if len(up.Messages) != len(msgs) {
			t.Fatalf("turn %d: upstream got %d messages, sent %d", turn, len(up.Messages), len(msgs))
		}
		placeholders, results := 0, 0
		for _, m := range up.Messages {
			if m.Role == "tool" {
				results++
				if m.Content == "[tool result cleared by context management]" {
					placeholders++
				}
			}
		}
		if placeholders != cleared || cleared < prevCleared {
			t.Fatalf("turn %d: upstream holds %d placeholders, applied_edits reports %d cleared (previous turn %d): edits must stay",
				turn, placeholders, cleared, prevCleared)
		}
		if !sticky && cleared > 0 && results-cleared != 1 {
			t.Fatalf("turn %d: %d of %d results intact; the documented rule keeps 1", turn, results-cleared, results)
		}
		kv, _ := chatwire.ReadKVParams(up.KVTransferParams)
		if kv.Session != "agent-1" || kv.Tenant != "acme" {
			t.Fatalf("turn %d: kv_transfer_params %+v", turn, kv)
		}
		if turn > 0 {
			// Everything but the newest messages (and the page the
			// previous answer ended in) is cached, after an edit too.
			newTokens := 0
			for _, m := range msgs[len(msgs)-2:] {
				newTokens += len(chatwire.RenderOne(m, tokenizeChunk4))
			}
			if ext.PrefilledTokens > newTokens+2*hostPage {
				t.Fatalf("turn %d (cleared %d, was %d): prefilled %d of %d, want at most the new %d tokens and a page or two",
					turn, cleared, prevCleared, ext.PrefilledTokens, ext.PromptTokens, newTokens)
			}
		}
		t.Logf("turn %d: prompt %d cached %d prefilled %d, cleared %d", turn, ext.PromptTokens, ext.CachedTokens, ext.PrefilledTokens, cleared)
		if cleared > prevCleared {
			edits++
		}
		prevCleared = cleared
		ans := c.Choices[0].Message
		if len(ans.ToolCalls) == 0 {
			t.Fatalf("turn %d: no tool call in %+v", turn, ans)
		}
		msgs = append(msgs, *ans, chat.Message{Role: "tool", ToolCallID: ans.ToolCalls[0].ID, Content: toolOutput(turn)})
	}
	if edits < 2 {
		t.Fatalf("%d turns made new edits, want at least 2", edits)
	}
	if sticky {
		if f.fills.Tokens.Load() == 0 {
			t.Fatal("the engine filled no replacement tokens")
		}
		if got := f.d.Engine().Stats().AutoSplices; got < uint64(edits) {
			t.Fatalf("the host spliced %d times for %d edits", got, edits)
		}
	}
	// The host's metrics count each clear once (those of earlier turns are
	// not counted again) and every request by its status.
	m := f.d.Metrics().Gateway
	if got := counterValue(t, m.Clears.WithLabelValues("clear_tool_uses_20250919")); int(got) != prevCleared {
		t.Fatalf("kvpilot_gateway_clears_total %v, want the %d items cleared", got, prevCleared)
	}
	if got := counterValue(t, m.ClearedTokens.WithLabelValues("clear_tool_uses_20250919")); got <= 0 {
		t.Fatalf("kvpilot_gateway_cleared_tokens_total %v", got)
	}
	if got := counterValue(t, m.Requests.WithLabelValues("openai", "200")); got != 8 {
		t.Fatalf("kvpilot_gateway_requests_total{api=openai,code=200} %v, want 8", got)
	}
}

func tokenizeChunk4(s string) []uint32 { return chunktok.Tokenize(s) }

// The engine's own HTTP server, without the front door: its models, a
// second turn's cached tokens and prefill in the usage, a stream with its
// usage chunk, and OpenAI-shaped errors.
func TestEngineHTTPServer(t *testing.T) {
	_, c := startDaemon(t, nil)
	e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	srv := httptestServer(t, refengine.NewServer(e, refengine.ServerOptions{}).Handler())
	f := &frontDoor{url: srv}
	var models chatwire.ModelList
	resp, err := http.Get(srv + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "ref-gqa" {
		t.Fatalf("models %+v", models)
	}
	msgs := []chat.Message{{Role: "system", Content: strings.Repeat("You are terse. ", 20)}, {Role: "user", Content: "hi"}}
	kv := json.RawMessage(`{"kvpilot":{"session":"s1","tenant":"t"}}`)
	var first, second completion
	f.post(t, "/v1/chat/completions", nil, map[string]any{"model": "ref-gqa", "messages": msgs, "kv_transfer_params": kv}, &first)
	msgs = append(msgs, *first.Choices[0].Message, chat.Message{Role: "user", Content: "more"})
	f.post(t, "/v1/chat/completions", nil, map[string]any{"model": "ref-gqa", "messages": msgs, "kv_transfer_params": kv}, &second)
	var st refengine.Stats
	if err := json.Unmarshal(second.KVPilot, &st); err != nil {
		t.Fatal(err)
	}
	u := second.Usage
	if u.Cached() < first.Usage.PromptTokens-hostPage || st.PrefilledTokens != u.PromptTokens-u.Cached() || st.CheckedRows == 0 {
		t.Fatalf("second turn: usage %+v, stats %+v (first prompt %d)", u, st, first.Usage.PromptTokens)
	}
	b, _ := json.Marshal(map[string]any{"model": "ref-gqa", "messages": msgs, "stream": true, "stream_options": map[string]bool{"include_usage": true}})
	resp, err = http.Post(srv+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`"role":"assistant"`)) || !bytes.Contains(body, []byte(`"prompt_tokens_details"`)) || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream:\n%s", body)
	}
	var e404, e400 chatwire.ErrorBody
	if code := f.post(t, "/v1/chat/completions", nil, map[string]any{"model": "other", "messages": msgs}, &e404); code != 404 || e404.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %d %+v", code, e404)
	}
	resp, err = http.Post(srv+"/v1/chat/completions", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&e400)
	resp.Body.Close()
	if resp.StatusCode != 400 || e400.Error.Code != "bad_request" || e400.Error.Hint == "" {
		t.Fatalf("malformed: %d %+v", resp.StatusCode, e400)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
