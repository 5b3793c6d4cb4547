package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// These tests stand in for vLLM with the connector: an upstream that
// tokenizes with the reference template (one token per byte), and an
// engine view whose session holds the last turn's tokens. The path through
// real vLLM is sdk/python/tests/test_gateway_vllm.py.

const prefillPage = 8

func byteTokens(s string) []uint32 {
	out := make([]uint32, len(s))
	for i := range len(s) {
		out[i] = uint32(s[i])
	}
	return out
}

// render is the prompt a chat request's messages make, generation prompt
// included.
func render(msgs []chat.Message) []uint32 {
	toks, _ := chatwire.Render(msgs, byteTokens)
	return append(toks, byteTokens("<assistant>")...)
}

type connectorUpstream struct {
	fakeUpstream
	mu      sync.Mutex
	paths   []string
	prompts [][]uint32
	// answered is when each prefill request was answered.
	answered []time.Time
	failTok  bool
}

func (c *connectorUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	failTok := c.failTok
	c.mu.Unlock()
	switch r.URL.Path {
	case "/tokenize":
		if failTok {
			http.Error(w, `{"error":{"message":"no tokenizer"}}`, http.StatusInternalServerError)
			return
		}
		var req struct {
			Messages []chat.Message `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		writeJSON(w, 200, map[string]any{"count": 0, "max_model_len": 0, "tokens": render(req.Messages)})
	case "/v1/completions":
		var req struct {
			Prompt []uint32 `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		c.mu.Lock()
		c.prompts = append(c.prompts, req.Prompt)
		c.answered = append(c.answered, time.Now())
		c.mu.Unlock()
		writeJSON(w, 200, map[string]any{"choices": []any{map[string]any{"text": "x"}}})
	default:
		c.fakeUpstream.ServeHTTP(w, r)
	}
}

// connectorEngine is the host's side: session s1 holds old, whose pages
// count as on the device tier; a prefill request's pages land there
// saveDelay after its response (vLLM's connector saves on a background
// thread), or never with noSave.
type connectorEngine struct {
	old       []uint32
	up        *connectorUpstream
	saveDelay time.Duration
	noSave    bool
	mu        sync.Mutex
	// staged records Stage's calls, room MakeRoom's.
	staged [][]uint32
	room   []int
}

func (e *connectorEngine) PrefillPage() (int, bool) { return prefillPage, true }
func (e *connectorEngine) SessionTokens(tenant, session string) ([]uint32, int, bool) {
	if session != "s1" {
		return nil, 0, false
	}
	return e.old, len(e.old) / prefillPage * prefillPage, true
}

func (e *connectorEngine) StagedPages(_ string, tokens []uint32) int {
	n := commonPrefix(e.old, tokens)
	e.up.mu.Lock()
	defer e.up.mu.Unlock()
	for i, p := range e.up.prompts {
		if !e.noSave && time.Since(e.up.answered[i]) >= e.saveDelay {
			n = max(n, commonPrefix(p, tokens))
		}
	}
	return n / prefillPage
}

func (e *connectorEngine) Stage(_ context.Context, _ string, tokens []uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.staged = append(e.staged, slices.Clone(tokens))
	return nil
}

func (e *connectorEngine) MakeRoom(_ context.Context, pages int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.room = append(e.room, pages)
}

func (e *connectorEngine) stagedCalls() [][]uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.staged)
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

type recordedDirectives struct {
	mu    sync.Mutex
	turns [][]directive.Directive
	// onSubmit, when set, runs as each turn is submitted.
	onSubmit func()
}

func (r *recordedDirectives) Submit(_ context.Context, _ string, ds []directive.Directive) directive.TurnReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.onSubmit != nil {
		r.onSubmit()
	}
	r.turns = append(r.turns, ds)
	return directive.TurnReply{Status: directive.StatusOK}
}

func startConnectorGateway(t *testing.T, up *connectorUpstream, old []uint32, first ...int) (*recordedDirectives, *metrics.Gateway, string) {
	t.Helper()
	return startConnectorGatewayOn(t, up, &connectorEngine{old: old, up: up}, first...)
}

func startConnectorGatewayOn(t *testing.T, up *connectorUpstream, eng *connectorEngine, first ...int) (*recordedDirectives, *metrics.Gateway, string) {
	t.Helper()
	us := httptestServer(t, up)
	dirs := &recordedDirectives{}
	m := &metrics.New().Gateway
	cfg := Config{Upstream: us + "/v1", Timeout: 2 * time.Second, Engine: eng, Metrics: m}
	if len(first) > 0 {
		cfg.RecomputeFirst = func(string) int { return first[0] }
	}
	g := New(cfg, dirs)
	return dirs, m, httptestServer(t, g.Handler())
}

func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// clearBody is a chat request over msgs that clears every tool result.
func clearBody(t *testing.T, msgs []chat.Message) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "context_management": map[string]any{
		"edits": []any{map[string]any{"type": EditClearToolUses, "trigger": map[string]any{"type": "input_tokens", "value": 1},
			"keep": map[string]any{"type": "tool_uses", "value": 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConnectorEditIsPrefilledThenSpliced(t *testing.T) {
	history := conversation(1)
	history = append(history, chat.Message{Role: "user", Content: "now explain what the output says, at length, line by line"})
	old := render(history)
	next := append(slices.Clone(history), chat.Message{Role: "assistant", Content: "it lists files"},
		chat.Message{Role: "user", Content: "thanks"})

	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}}
	dirs, m, gw := startConnectorGateway(t, up, old)
	if code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if want := []string{"/tokenize", "/v1/completions", "/v1/chat/completions"}; !slices.Equal(up.paths, want) {
		t.Fatalf("upstream saw %v, want %v", up.paths, want)
	}
	if len(dirs.turns) != 1 || len(dirs.turns[0]) != 1 {
		t.Fatalf("directives %v, want one splice", dirs.turns)
	}
	sp, ok := dirs.turns[0][0].(directive.Splice)
	if !ok || sp.Session != "s1" {
		t.Fatalf("directive %#v, want a Splice of s1", dirs.turns[0][0])
	}
	edited := slices.Concat(old[:sp.Start], sp.Replacement.Tokens, old[sp.End:])
	forwarded := render(up.received[len(up.received)-1].Messages)
	if !slices.Equal(edited, forwarded[:len(edited)]) {
		t.Fatal("the splice does not turn the session's tokens into a prefix of the forwarded prompt")
	}
	f := int(sp.Start) + len(sp.Replacement.Tokens)
	prompt := up.prompts[0]
	if len(prompt)%prefillPage != 0 || len(prompt) < f || len(prompt) >= f+prefillPage || !slices.Equal(prompt, forwarded[:len(prompt)]) {
		t.Fatalf("prefill of %d tokens; want the forwarded prompt to the first page boundary at or after %d", len(prompt), f)
	}
	if int(sp.End) >= len(old)/prefillPage*prefillPage {
		t.Fatalf("splice ends at %d: nothing cached after it is kept", sp.End)
	}
	if n := counted(t, m.EngineSplices.WithLabelValues(outcomeSpliced)); n != 1 {
		t.Fatalf("%v splices counted, want 1", n)
	}
	if n := counted(t, m.PrefilledTokens); n != float64(len(prompt)-int(sp.Start)/prefillPage*prefillPage) {
		t.Fatalf("%v prefilled tokens counted for a %d-token prefill from %d", n, len(prompt), sp.Start)
	}
}

// With splice.recompute.first the prefill request runs that many tokens
// past the replacement (to a page boundary, never into the prompt's last
// page), so the splice adopts them fresh; the response says how many.
func TestConnectorRecomputeFirstExtendsThePrefill(t *testing.T) {
	history := conversation(1)
	history = append(history, chat.Message{Role: "user", Content: "now explain what the output says, at length, line by line"})
	old := render(history)
	next := append(slices.Clone(history), chat.Message{Role: "assistant", Content: "it lists files"},
		chat.Message{Role: "user", Content: "thanks"})
	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}}
	const first = 20
	dirs, _, gw := startConnectorGateway(t, up, old, first)
	code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1")
	if code != 200 || len(dirs.turns) != 1 {
		t.Fatalf("%d %s, directives %v", code, b, dirs.turns)
	}
	sp := dirs.turns[0][0].(directive.Splice)
	f := int(sp.Start) + len(sp.Replacement.Tokens)
	prompt := up.prompts[0]
	if want := (f + first + prefillPage - 1) / prefillPage * prefillPage; len(prompt) != want {
		t.Fatalf("prefill of %d tokens, want %d: the first page boundary at or after %d + %d", len(prompt), want, f, first)
	}
	if sp.Recompute != nil {
		t.Fatalf("the splice asks recompute %+v of an engine that cannot: the prefill did it", *sp.Recompute)
	}
	var resp struct {
		ContextManagement extension `json:"context_management"`
	}
	if err := json.Unmarshal([]byte(b), &resp); err != nil || resp.ContextManagement.RecomputedTokens != len(prompt)-f {
		t.Fatalf("context_management %+v (%v), want recomputed_tokens %d", resp.ContextManagement, err, len(prompt)-f)
	}
}

// vLLM's connector saves a request's pages on a background thread, so the
// prefill's response can come before its pages are in the host: a splice
// submitted then adopts nothing and keeps nothing after the edit. The front
// door waits for them, and has the session's cached pages brought back to
// the device tier (the splicer moves only rows there) before splicing.
func TestConnectorSpliceWaitsForThePrefillsPages(t *testing.T) {
	history := append(conversation(1), chat.Message{Role: "user", Content: "now explain what the output says, at length, line by line"})
	old := render(history)
	next := append(slices.Clone(history), chat.Message{Role: "assistant", Content: "it lists files"},
		chat.Message{Role: "user", Content: "thanks"})
	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}}
	eng := &connectorEngine{old: old, up: up, saveDelay: 50 * time.Millisecond}
	dirs, m, gw := startConnectorGatewayOn(t, up, eng)
	var stagedAtSplice, prefillPages int
	var stageCalls [][]uint32
	dirs.onSubmit = func() {
		p := up.prompts[0]
		stagedAtSplice, prefillPages = eng.StagedPages("", p), len(p)/prefillPage
		stageCalls = eng.stagedCalls()
	}
	if code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if len(dirs.turns) != 1 {
		t.Fatalf("directives %v, want one splice", dirs.turns)
	}
	if stagedAtSplice != prefillPages {
		t.Fatalf("the splice was submitted with %d of the prefill's %d pages saved", stagedAtSplice, prefillPages)
	}
	cached := len(old) / prefillPage * prefillPage
	if len(stageCalls) != 1 || !slices.Equal(stageCalls[0], old[:cached]) {
		t.Fatalf("staged %d times before the splice, want once, the session's %d cached tokens", len(stageCalls), cached)
	}
	sp := dirs.turns[0][0].(directive.Splice)
	if moved := (cached - int(sp.Start)/prefillPage*prefillPage) / prefillPage; len(eng.room) != 1 || eng.room[0] <= moved {
		t.Fatalf("room asked for %v before the splice, want once, more than the %d pages it moves", eng.room, moved)
	}
	if n := counted(t, m.EngineSplices.WithLabelValues(outcomeSpliced)); n != 1 {
		t.Fatalf("%v splices counted, want 1", n)
	}
}

// A prefill whose pages never land (the connector skipped its save) is
// not spliced: the request goes on, and the engine prefills after the edit.
func TestConnectorUnsavedPrefillIsNotSpliced(t *testing.T) {
	history := append(conversation(1), chat.Message{Role: "user", Content: "now explain what the output says, at length, line by line"})
	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}}
	eng := &connectorEngine{old: render(history), up: up, noSave: true}
	dirs, m, gw := startConnectorGatewayOn(t, up, eng)
	next := append(slices.Clone(history), chat.Message{Role: "user", Content: "thanks"})
	if code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if want := []string{"/tokenize", "/v1/completions", "/v1/chat/completions"}; !slices.Equal(up.paths, want) {
		t.Fatalf("upstream saw %v, want %v", up.paths, want)
	}
	if len(dirs.turns) != 0 {
		t.Fatalf("directives %v, want none", dirs.turns)
	}
	if n := counted(t, m.EngineSplices.WithLabelValues(outcomeUnsaved)); n != 1 {
		t.Fatalf("%v unsaved prefills counted, want 1", n)
	}
}

// A failed step leaves the request as it would be without the front
// door's splice: forwarded, and nothing spliced.
func TestConnectorEditFailureStillForwards(t *testing.T) {
	history := append(conversation(1), chat.Message{Role: "user", Content: "now explain what the output says, at length"})
	up := &connectorUpstream{fakeUpstream: fakeUpstream{mode: "ok"}, failTok: true}
	dirs, m, gw := startConnectorGateway(t, up, render(history))
	next := append(slices.Clone(history), chat.Message{Role: "user", Content: "thanks"})
	if code, b := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if want := []string{"/tokenize", "/v1/chat/completions"}; !slices.Equal(up.paths, want) {
		t.Fatalf("upstream saw %v, want %v", up.paths, want)
	}
	if len(dirs.turns) != 0 {
		t.Fatalf("directives %v, want none", dirs.turns)
	}
	if n := counted(t, m.EngineSplices.WithLabelValues(outcomeTokenize)); n != 1 {
		t.Fatalf("%v tokenize failures counted, want 1", n)
	}
	// A turn with no new edit asks nothing more of the upstream.
	up.paths = nil
	if code, _ := post(t, gw+"/v1/chat/completions", clearBody(t, next), SessionHeader, "s1"); code != 200 || !slices.Equal(up.paths, []string{"/v1/chat/completions"}) {
		t.Fatalf("%d, upstream saw %v", code, up.paths)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
