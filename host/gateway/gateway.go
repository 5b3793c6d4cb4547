// Package gateway is kvpilot's front door: an HTTP server
// that speaks OpenAI's Chat Completions (POST /v1/chat/completions) and
// Anthropic's Messages (POST /v1/messages) APIs, streaming and not, and
// forwards to the engine's OpenAI-compatible server (GET /v1/models is
// passed through).
//
// Harnesses resend their whole history every turn, so an edit a policy
// makes only in the cache is undone by the next request. The front door
// makes edits real: it applies them to the messages before forwarding
// (the request's own context_management edits, or else the host's
// policies' rules), remembers them per session so every later turn
// carries the same placeholder (the prefix stays stable and an edit is
// paid for once), and names the session, tenant and cache_control in
// kv_transfer_params so the engine files the KV under the session. The
// host's session diff (index.auto_splice) then splices the cache at each
// new edit, and only the replacement is prefilled.
//
// Connector mode (vLLM with kvpilot's KV connector): vLLM's OpenAI server
// hands a request's kv_transfer_params to the connector (installed vLLM:
// ChatCompletionRequest.kv_transfer_params goes into
// SamplingParams.extra_args, which v1's Request exposes as
// kv_transfer_params), so session, tenant and cache_control arrive where
// the connector reads them. The connector sends the host tokens without
// message spans and serves no fill orders, so the host's session diff
// cannot splice there; the front door does it instead (prefill.go): for a
// request with a new edit it tokenizes the edited messages with vLLM's
// /tokenize, diffs them against the session's cached tokens, has vLLM
// prefill the edited prompt up to the first page boundary after the
// replacement with a prefill-only /v1/completions request (vLLM's
// connector saves full prompt pages, on a background thread: the front
// door waits until the host holds them), brings the session's pages back
// into staging, and splices the session on top of the prefill's pages,
// so the request that follows takes the tokens after the
// edit from kvpilot (sdk/python/tests/test_gateway_vllm.py checks that,
// and that the first token's probabilities match vLLM computing the same
// prompt alone).
//
// Files: openai.go and anthropic*.go are the two APIs; session.go names
// sessions and keeps their state; edits*.go and policyedits.go decide the
// edits; prefill.go splices them on a connector-mode engine; upstream.go,
// stream.go and errors.go talk to the engine and answer failures in each
// API's own shape; directives.go is the one door to the host's directive
// path (cache_control pins, and prefill.go's splices).
package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Config configures a Server.
type Config struct {
	// Upstream is the engine's OpenAI-compatible base URL (…/v1).
	Upstream       string
	UpstreamAPIKey string
	// Timeout bounds the wait for the upstream's response headers.
	Timeout time.Duration
	// TenantHeader and Tenants bind a request's tenant (tenants.go).
	TenantHeader string
	Tenants      map[string][]string
	MaxSessions  int
	// Policy is the edits of requests without context_management.
	Policy Rules
	// StickyClears keeps a session's clears from turn to turn instead of
	// deciding each request by the documented rule (Rules.StickyClears).
	StickyClears bool
	// Tokenize, when set, is the engine's tokenizer under the reference
	// template: cache_control breakpoints then become pins that end
	// exactly at their block. Without it the last breakpoint's
	// cache_control goes to the engine in kv_transfer_params, which pins
	// the whole prompt at finish.
	Tokenize chatwire.Tokenizer
	// PageSize is the host's tokens per page (index.page_size): a pin
	// covers whole pages, so a breakpoint before the first page boundary
	// pins nothing and is not sent.
	PageSize int
	// Engine, when set, lets the front door splice its edits on an engine
	// that serves no fill orders (prefill.go).
	Engine Engine
	// RecomputeFirst is a tenant's splice.recompute.first: on an Engine
	// that needs the front door's prefill, that request runs that many
	// tokens past the replacement, so the splice keeps them fresh (nil: 0).
	RecomputeFirst func(tenant string) int
	// AwaitSaves bounds an edited turn's wait for the saves of its
	// session's previous turn (prefill.go; 0: no wait).
	AwaitSaves time.Duration
	// MaxBodyBytes bounds a request body (default 32 MiB).
	MaxBodyBytes int64
	Log          hclog.Logger
	// Metrics, when set, receives the front door's (metrics.go).
	Metrics *metrics.Gateway
}

// Server is the front door.
type Server struct {
	cfg      Config
	up       *upstream
	sessions *store
	bind     binding
	dirs     Directives
	// subPage says once that breakpoints before the first page boundary
	// pin nothing (a harness sends the same ones every turn).
	subPage sync.Once
}

// New returns a front door that forwards to cfg.Upstream and sends its
// directives to dirs (nil: cache_control breakpoints only reach the engine).
func New(cfg Config, dirs Directives) *Server {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10000
	}
	if cfg.TenantHeader == "" {
		cfg.TenantHeader = "x-kvpilot-tenant"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	return &Server{cfg: cfg, up: newUpstream(cfg.Upstream, cfg.UpstreamAPIKey, cfg.Timeout),
		sessions: newStore(cfg.MaxSessions), bind: binding{header: cfg.TenantHeader, keys: cfg.Tenants}, dirs: dirs}
}

// Handler routes the front door's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.measured(apiOpenAI, s.openAI))
	mux.HandleFunc("POST /v1/messages", s.measured(apiAnthropic, s.anthropic))
	mux.HandleFunc("GET /v1/models", s.measured(apiModels, s.models))
	return mux
}

// Sessions is how many sessions the front door remembers.
func (s *Server) Sessions() int { return s.sessions.Len() }

// models passes GET /v1/models through.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	resp, e := s.up.do(r.Context(), http.MethodGet, "/models", nil)
	if e != nil {
		writeOpenAI(w, e)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// breakpoint is a cache_control breakpoint: the prefix through message
// Msg is to be pinned for TTL.
type breakpoint struct {
	Msg int
	TTL time.Duration
	Raw json.RawMessage
}

// turn is one request on its way through the front door.
type turn struct {
	tenant string
	sess   session
	out    Outcome
	breaks []breakpoint
	// recomputed counts kept tokens the front door's prefill request
	// computed afresh past a splice's replacement (prefill.go).
	recomputed int
}

// prepare binds the tenant, resolves the session and applies the edits.
func (s *Server) prepare(r *http.Request, msgs []chat.Message, own *Rules, breaks []breakpoint) (*turn, *apiError) {
	tenant, err := s.bind.tenant(r)
	if err != nil {
		return nil, &apiError{status: http.StatusForbidden, err: err}
	}
	if len(msgs) == 0 {
		return nil, &apiError{status: http.StatusBadRequest, err: errcode.New(errcode.MissingField, "messages: the request holds none")}
	}
	sess := s.sessions.resolve(tenant, r.Header.Get(SessionHeader), msgs)
	rules := s.cfg.Policy
	if own != nil {
		rules = *own
	}
	rules.StickyClears = s.cfg.StickyClears
	out := Apply(msgs, rules, sess.sticky)
	return &turn{tenant: tenant, sess: sess, out: out, breaks: breaks}, nil
}

// forwardBody is the request body sent upstream: the client's fields, the
// edited messages, and kvpilot's kv_transfer_params.
func (s *Server) forwardBody(raw map[string]json.RawMessage, t *turn) ([]byte, *apiError) {
	msgs, err := json.Marshal(t.out.Messages)
	if err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, err: errcode.Wrap(errcode.Internal, err, "encode messages")}
	}
	raw["messages"] = msgs
	delete(raw, "context_management")
	kvt := map[string]json.RawMessage{}
	if prev, ok := raw["kv_transfer_params"]; ok {
		_ = json.Unmarshal(prev, &kvt) // a non-object is replaced
	}
	params := chatwire.KVParams{Session: t.sess.id, Tenant: t.tenant}
	if s.cfg.Tokenize == nil && len(t.breaks) > 0 {
		params.CacheControl = longest(t.breaks).Raw
	}
	kvt["kvpilot"], _ = json.Marshal(params)
	raw["kv_transfer_params"], _ = json.Marshal(kvt)
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, err: errcode.Wrap(errcode.Internal, err, "encode request")}
	}
	return b, nil
}

func longest(bs []breakpoint) breakpoint {
	best := bs[len(bs)-1]
	for _, b := range bs {
		if b.TTL > best.TTL {
			best = b
		}
	}
	return best
}

// accepted records the turn once the upstream accepted it: the engine has
// seen the edited messages, so the session's clears must stay (a refused
// or failed request leaves the session as it was).
func (s *Server) accepted(t *turn) {
	t.sess.sticky = t.out.Next
	s.sessions.save(t.sess)
	s.countClears(t.out.Fresh)
}

// pin turns the breakpoints into pins of the session's prefix, once the
// engine has committed the request's pages.
func (s *Server) pin(ctx context.Context, t *turn) {
	if s.dirs == nil || s.cfg.Tokenize == nil || len(t.breaks) == 0 {
		return
	}
	ds := make([]directive.Directive, 0, len(t.breaks))
	for _, b := range t.breaks {
		toks, _ := chatwire.Render(t.out.Messages[:b.Msg+1], s.cfg.Tokenize)
		if len(toks) < s.cfg.PageSize {
			s.subPage.Do(func() {
				s.cfg.Log.Debug("cache_control breakpoint before the first page boundary: nothing pinned, as a pin covers whole pages (said once)",
					"session", t.sess.id, "tokens", len(toks), "page_size", s.cfg.PageSize)
			})
			continue
		}
		ttl := directive.TTL(b.TTL)
		ds = append(ds, directive.Pin{Session: t.sess.id, End: int64(len(toks)), TTL: &ttl})
	}
	if len(ds) == 0 {
		return
	}
	reply := s.dirs.Submit(ctx, t.tenant, ds)
	if reply.Status != directive.StatusOK {
		s.cfg.Log.Warn("cache_control breakpoints not pinned", "session", t.sess.id, "tenant", t.tenant, "error", reply.Error)
		s.countPins(pinRefused, len(ds))
		return
	}
	for i, res := range reply.Results {
		asked := ds[i].(directive.Pin).TTL.Duration()
		if got := res.Effect.TTL.Duration(); got > 0 && got != asked {
			// The host's pins.min_ttl or pins.max_ttl: said, as the pin
			// lands after the response went out.
			s.cfg.Log.Info("breakpoint pinned with a clamped TTL", "session", t.sess.id, "tenant", t.tenant,
				"asked", asked, "granted", got)
			s.countPins(pinClamped, 1)
			continue
		}
		s.countPins(pinPinned, 1)
	}
}

// The outcomes of a breakpoint's pin (kvpilot_gateway_pins_total).
const (
	pinPinned  = "pinned"
	pinClamped = "clamped"
	pinRefused = "refused"
)

func (s *Server) countPins(outcome string, n int) {
	if m := s.cfg.Metrics; m != nil {
		m.Pins.WithLabelValues(outcome).Add(float64(n))
	}
}

// extension is the front door's report in an OpenAI response (an
// extension field; Anthropic responses carry the same in their own
// context_management).
type extension struct {
	AppliedEdits []Applied `json:"applied_edits"`
	// RecomputedTokens counts the tokens after this request's new edit that
	// the front door had the engine prefill again before splicing (the
	// rest of the replacement's page and splice.recompute.first).
	RecomputedTokens int `json:"recomputed_tokens,omitempty"`
}

func (t *turn) report() extension {
	applied := t.out.Applied
	if applied == nil {
		applied = []Applied{}
	}
	return extension{AppliedEdits: applied, RecomputedTokens: t.recomputed}
}
