package ingress

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// env is an ingress over a real executor and index, auditing to a ring.
type env struct {
	in   *Ingress
	ring *executor.Ring
	m    *metrics.Metrics
	g    *guarded.Index
}

func newEnv(t *testing.T, mod func(*Config)) env {
	t.Helper()
	ix, err := cache.New(cache.Config{PageSize: 4, Clock: cache.NewManualClock(time.Second),
		Tiers: [tier.Count]cache.TierConfig{tier.Device: {Capacity: 16, High: 0.9, Low: 0.5, PinFraction: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	e := env{ring: executor.NewRing(16), m: metrics.New(), g: guarded.New(ix)}
	ex, err := executor.New(executor.Config{Index: e.g, WorkerID: "9", Audit: e.ring})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Executor: ex, Audit: e.ring, Metrics: e.m}
	if mod != nil {
		mod(&cfg)
	}
	if e.in, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func counter(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func pinTurn() directive.Turn {
	return directive.Turn{ID: "t1", Source: "src", Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: []directive.Hash{7}, Pin: true}}}
}

// A door's limit refuses past its burst with rate_limited naming the
// source and the config key, counts it under the door, and audits nothing;
// a door without a limit is never refused.
func TestAdmitLimitsPerDoor(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.RateLimits = map[Door]RateLimit{NATS: {PerSecond: 0.001, Burst: 1, Key: "nats.rate_limit"}}
	})
	if err := e.in.Admit(NATS, "nats:a"); err != nil {
		t.Fatalf("first command refused: %v", err)
	}
	err := e.in.Admit(NATS, "nats:a")
	if err == nil || err.Code != errcode.RateLimited || !strings.Contains(err.Detail, "nats:a") || !strings.Contains(err.Detail, "nats.rate_limit") {
		t.Fatalf("past the burst: %v", err)
	}
	if err := e.in.Admit(NATS, "nats:b"); err != nil {
		t.Fatalf("another source shares a's bucket: %v", err)
	}
	for i := 0; i < 5; i++ {
		if err := e.in.Admit(Socket, "uid 1"); err != nil {
			t.Fatalf("an unlimited door refused: %v", err)
		}
	}
	if n := counter(t, e.m.RateLimited.WithLabelValues("nats")); n != 1 {
		t.Errorf("rate_limited{nats} = %v, want 1", n)
	}
	if n := e.ring.Total(); n != 0 {
		t.Errorf("rate-limit refusals audited: %d records", n)
	}
	if _, err := New(Config{Executor: e.in.cfg.Executor, RateLimits: map[Door]RateLimit{NATS: {PerSecond: -1, Key: "nats.rate_limit"}}}); err == nil {
		t.Error("a negative rate was accepted")
	}
}

// A turn a door refused is answered per directive, counted under its
// verbs, and audited as one record (index -1) when asked to.
func TestRefuseTurnCountsAndAudits(t *testing.T) {
	e := newEnv(t, nil)
	denied := errcode.New(errcode.PermissionDenied, "uid 5 may not act for tenant acme")
	r := e.in.RefuseTurn(pinTurn(), denied, true)
	if r.Status != directive.StatusError || len(r.Results) != 1 || r.Results[0].Error.Code != errcode.PermissionDenied || r.WorkerID != "9" {
		t.Fatalf("reply %+v", r)
	}
	recs := e.ring.Records()
	if len(recs) != 1 || recs[0].Index != -1 || recs[0].Verb != "turn" || recs[0].Code != errcode.PermissionDenied ||
		recs[0].Source != "src" || recs[0].Tenant != "acme" || recs[0].Target != "turn[Cache]" {
		t.Fatalf("audit %+v", recs)
	}
	e.in.RefuseTurn(pinTurn(), denied, false)
	if n := e.ring.Total(); n != 1 {
		t.Errorf("a refusal without audit was audited: %d records", n)
	}
	if n := counter(t, e.m.Directives.WithLabelValues("Cache", "permission_denied")); n != 2 {
		t.Errorf("refused pins counted %v times, want 2", n)
	}
	cc := e.in.RefuseCacheControl("src", "acme", directive.ActionPinBlocks, denied, true)
	if cc.Code != errcode.PermissionDenied || e.ring.Total() != 2 {
		t.Errorf("cache_control refusal %+v, %d records", cc, e.ring.Total())
	}
	if n := counter(t, e.m.Directives.WithLabelValues("pin_blocks", "permission_denied")); n != 1 {
		t.Errorf("refused cache_control counted %v times, want 1", n)
	}
}

// Text replacements are tokenized before the executor sees them, without
// editing the door's turn; a tokenizer that fails refuses the turn with
// bad_request, audited and counted. (With no splicer attached the
// executor then refuses the splice as unavailable: the span verbs' own
// tests cover applying tokens.)
func TestTokenizesTextReplacements(t *testing.T) {
	splice := directive.Turn{Source: "p", Tenant: "acme", Directives: []directive.Directive{
		directive.Splice{Session: "s", Start: 0, End: 4, Replacement: directive.Replacement{Text: "hi"}}}}
	var seen []string
	cases := []struct {
		name     string
		tokenize func(string) ([]uint32, error)
		want     errcode.Code
	}{
		{"ok", func(s string) ([]uint32, error) { seen = append(seen, s); return []uint32{1, 2}, nil }, errcode.Unavailable},
		{"fails", func(string) ([]uint32, error) { return nil, errors.New("no vocabulary") }, errcode.BadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(cfg *Config) { cfg.Tokenize = c.tokenize })
			r := e.in.Apply(context.Background(), splice)
			if r.Status == directive.StatusOK || len(r.Results) != 1 || r.Results[0].Error == nil || r.Results[0].Error.Code != c.want {
				t.Fatalf("reply %+v, want %s", r, c.want)
			}
			if n := counter(t, e.m.Directives.WithLabelValues("Splice", string(c.want))); n != 1 {
				t.Errorf("counted %v, want 1", n)
			}
			if e.ring.Total() == 0 {
				t.Error("not audited")
			}
			if sp := splice.Directives[0].(directive.Splice); sp.Replacement.Text != "hi" {
				t.Error("the door's turn was edited in place")
			}
		})
	}
	if len(seen) != 1 || seen[0] != "hi" {
		t.Errorf("tokenizer saw %q, want [hi]", seen)
	}
}
