package config

import (
	"fmt"
	"net"
	"net/url"
	"time"
)

// Gateway is the front door: an OpenAI- and
// Anthropic-compatible HTTP API that applies edits to the messages and
// forwards them to the engine's OpenAI-compatible server. Off by default.
type Gateway struct {
	// Listen is host:port of the front door; "" (the default) keeps it off.
	Listen string `koanf:"listen"`
	// Upstream is the engine's OpenAI-compatible base URL, the part before
	// /chat/completions, e.g. http://127.0.0.1:8000/v1. Required when
	// Listen is set.
	Upstream string `koanf:"upstream"`
	// UpstreamAPIKey, when set, is sent upstream as a bearer token; the
	// clients' own keys are never forwarded.
	UpstreamAPIKey string `koanf:"upstream_api_key"`
	// Timeout bounds the wait for the upstream's response headers (a slow
	// upstream is answered 504); a stream may then run as long as it flows.
	Timeout time.Duration `koanf:"timeout"`
	// TenantHeader names the request header that carries the tenant.
	TenantHeader string `koanf:"tenant_header"`
	// Tenants binds API keys (sent as "Authorization: Bearer KEY" or
	// "x-api-key: KEY") to the tenants they may act for, as control.tenants
	// binds uids; "*" is every tenant. Empty: unbound, the tenant header is
	// taken as given.
	Tenants map[string][]string `koanf:"tenants"`
	// MaxSessions bounds the sessions whose edits the front door remembers;
	// the least recently used is forgotten first.
	MaxSessions int `koanf:"max_sessions"`
	// PolicyEdits makes the configured truncation and think-evict policies
	// decide the edits of requests that carry no context_management.
	PolicyEdits bool `koanf:"policy_edits"`
	// StickyClears keeps a session's clears from turn to turn: a tool
	// result or reasoning, once cleared, stays cleared, and new tool clears
	// fire only when the prompt as already edited reaches the trigger. That
	// breaks the cache less often, but between triggers more than keep tool
	// results stay intact. Off (the default), every request is decided by
	// the documented rule on its whole history: once the unedited input
	// reaches the trigger, all tool results but the newest keep are cleared
	// (or none, under clear_at_least).
	StickyClears bool `koanf:"sticky_clears"`
	// Policies, when set, are the policies whose rules decide those edits
	// instead of the policies section's (same format; they run in the
	// front door only, not as plugins on the cache). A prefix cache that
	// receives the same edits as a kvpilot host is configured so.
	Policies []Policy `koanf:"policies"`
	// AwaitSaves bounds how long an edited turn waits for the saves of its
	// session's previous turn before the front door splices it, on an
	// engine whose connector saves behind the response (vLLM's): a splice
	// planned before they land keeps only the pages already saved, and the
	// engine prefills the rest. 0 does not wait.
	AwaitSaves time.Duration `koanf:"await_saves"`
}

// EditPolicies are the policies whose rules decide the front door's edits.
func (g Gateway) EditPolicies(all []Policy) []Policy {
	if !g.PolicyEdits {
		return nil
	}
	if len(g.Policies) > 0 {
		return g.Policies
	}
	return all
}

// DefaultAwaitSaves is gateway.await_saves's default. A turn's saves land
// milliseconds after its response on an idle machine, and under load
// (kvpilot bench agents: eight sessions on vLLM's CPU build, tool times of
// 1 s and 100 ms) every edited turn found them landed, queued behind the
// other sessions' prefills; the bound keeps a turn whose saves were
// skipped from waiting longer than a short prefill takes.
const DefaultAwaitSaves = 500 * time.Millisecond

// DefaultGateway is the gateway's built-in configuration (off).
func DefaultGateway() Gateway {
	return Gateway{Timeout: 120 * time.Second, TenantHeader: "x-kvpilot-tenant", MaxSessions: 10000, PolicyEdits: true,
		AwaitSaves: DefaultAwaitSaves}
}

// validateGateway checks the gateway section when it is on.
func (c Config) validateGateway(bad func(key, format string, args ...any)) {
	g := c.Gateway
	if g.Listen == "" {
		return
	}
	if _, _, err := net.SplitHostPort(g.Listen); err != nil {
		bad("gateway.listen", "%q is not host:port: %v", g.Listen, err)
	}
	u, err := url.Parse(g.Upstream)
	switch {
	case g.Upstream == "":
		bad("gateway.upstream", "must be set when gateway.listen is: the engine's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
	case err != nil:
		bad("gateway.upstream", "%q: %v", g.Upstream, err)
	case u.Scheme != "http" && u.Scheme != "https":
		bad("gateway.upstream", "%q: want an http or https URL", g.Upstream)
	case u.Host == "":
		bad("gateway.upstream", "%q names no host", g.Upstream)
	}
	if g.Timeout <= 0 {
		bad("gateway.timeout", "must be positive, got %v", g.Timeout)
	}
	if g.AwaitSaves < 0 {
		bad("gateway.await_saves", "must not be negative, got %v (0 does not wait)", g.AwaitSaves)
	}
	if g.TenantHeader == "" {
		bad("gateway.tenant_header", "must not be empty")
	}
	if g.MaxSessions <= 0 {
		bad("gateway.max_sessions", "must be positive, got %d", g.MaxSessions)
	}
	for i, p := range g.Policies {
		if err := CheckBuiltin(p.Builtin, p.Params); err != nil {
			bad(fmt.Sprintf("gateway.policies[%d]", i), "%v", err)
		}
	}
	for key, ts := range g.Tenants {
		if key == "" || len(ts) == 0 {
			bad("gateway.tenants", "an API key %s binds no tenants", fmt.Sprintf("of %d characters", len(key)))
		}
	}
}
