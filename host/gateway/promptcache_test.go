package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func breakpointsOf(t *testing.T, body string) ([]breakpoint, map[string]json.RawMessage, error) {
	t.Helper()
	req, raw, err := ParseOpenAI([]byte(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	bs, err := openAIBreakpoints(raw, len(req.Messages))
	return bs, raw, err
}

func TestOpenAIPromptCacheFields(t *testing.T) {
	const msgs = `"messages":[{"role":"system","content":[{"type":"text","text":"rules","prompt_cache_breakpoint":{"mode":"explicit","ttl":"12h"}},{"type":"text","text":"more"}]},` +
		`{"role":"user","content":[{"type":"text","text":"q","prompt_cache_breakpoint":{"mode":"explicit"}}]},{"role":"user","content":"last"}]`
	cases := []struct {
		name, fields string
		want         []breakpoint // Msg and TTL
	}{
		{"parts alone pin nothing more", ``, []breakpoint{{Msg: 0, TTL: 12 * time.Hour}, {Msg: 1, TTL: 30 * time.Minute}}},
		{"implicit adds the prompt's end", `"prompt_cache_options":{"ttl":"30m"},`,
			[]breakpoint{{Msg: 0, TTL: 12 * time.Hour}, {Msg: 1, TTL: 30 * time.Minute}, {Msg: 2, TTL: 30 * time.Minute}}},
		{"explicit keeps the parts'", `"prompt_cache_options":{"mode":"explicit"},`,
			[]breakpoint{{Msg: 0, TTL: 12 * time.Hour}, {Msg: 1, TTL: 30 * time.Minute}}},
		{"24h retention", `"prompt_cache_retention":"24h","prompt_cache_options":{"mode":"explicit"},`,
			[]breakpoint{{Msg: 0, TTL: 12 * time.Hour}, {Msg: 1, TTL: 30 * time.Minute}, {Msg: 2, TTL: 24 * time.Hour}}},
		{"in-memory retention pins nothing", `"prompt_cache_retention":"in_memory","prompt_cache_options":{"mode":"explicit"},`,
			[]breakpoint{{Msg: 0, TTL: 12 * time.Hour}, {Msg: 1, TTL: 30 * time.Minute}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs, raw, err := breakpointsOf(t, `{"model":"m",`+c.fields+msgs+`}`)
			if err != nil {
				t.Fatal(err)
			}
			if len(bs) != len(c.want) {
				t.Fatalf("%d breakpoints %+v, want %d", len(bs), bs, len(c.want))
			}
			for i, b := range bs {
				if b.Msg != c.want[i].Msg || b.TTL != c.want[i].TTL {
					t.Fatalf("breakpoint %d: message %d ttl %v, want %d %v", i, b.Msg, b.TTL, c.want[i].Msg, c.want[i].TTL)
				}
				var cc struct{ Type, TTL string }
				if json.Unmarshal(b.Raw, &cc) != nil || cc.Type != "ephemeral" || cc.TTL != itoaSeconds(b.TTL) {
					t.Fatalf("breakpoint %d's cache_control %s", i, b.Raw)
				}
			}
			if _, ok := raw["prompt_cache_options"]; ok {
				t.Fatal("prompt_cache_options left in the forwarded body")
			}
			if _, ok := raw["prompt_cache_retention"]; ok {
				t.Fatal("prompt_cache_retention left in the forwarded body")
			}
		})
	}
}

func itoaSeconds(d time.Duration) string {
	b, _ := json.Marshal(int64(d / time.Second))
	return string(b)
}

func TestOpenAIPromptCacheFieldsRefused(t *testing.T) {
	for body, code := range map[string]errcode.Code{
		`{"model":"m","prompt_cache_options":{"mode":"always"},"messages":[{"role":"user","content":"x"}]}`:                                           errcode.BadRequest,
		`{"model":"m","prompt_cache_options":{"ttl":"forever"},"messages":[{"role":"user","content":"x"}]}`:                                           errcode.InvalidTTL,
		`{"model":"m","prompt_cache_retention":"7d","messages":[{"role":"user","content":"x"}]}`:                                                      errcode.BadRequest,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","prompt_cache_breakpoint":{"mode":"implicit"}}]}]}`:             errcode.BadRequest,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","prompt_cache_breakpoint":{"mode":"explicit","ttl":"-5m"}}]}]}`: errcode.InvalidTTL,
	} {
		_, _, err := breakpointsOf(t, body)
		var e *errcode.Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("%s: %v, want %s", body, err, code)
		}
	}
}

// clampingDirectives grants every pin at most an hour, as pins.max_ttl
// 1h would.
type clampingDirectives struct {
	mu   sync.Mutex
	pins []directive.Pin
}

func (c *clampingDirectives) Submit(_ context.Context, _ string, ds []directive.Directive) directive.TurnReply {
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := directive.TurnReply{Status: directive.StatusOK}
	for i, d := range ds {
		p := d.(directive.Pin)
		c.pins = append(c.pins, p)
		reply.Results = append(reply.Results, directive.Result{Index: i, Status: directive.StatusOK,
			Effect: directive.Effect{TTL: min(*p.TTL, directive.TTL(time.Hour))}})
	}
	return reply
}

// Through the front door: each breakpoint becomes a pin of the session's
// prefix through its message, once the response is out, and a TTL the host
// clamped is counted as such.
func TestOpenAIPromptCachePins(t *testing.T) {
	dirs := &clampingDirectives{}
	m := &metrics.New().Gateway
	up := httptestServer(t, &fakeUpstream{mode: "ok"})
	g := New(Config{Upstream: up + "/v1", Timeout: 2 * time.Second, Tokenize: byteTokens, PageSize: 8, Metrics: m}, dirs)
	gw := httptestServer(t, g.Handler())
	body := `{"model":"m","prompt_cache_retention":"24h","prompt_cache_options":{"mode":"explicit"},"messages":[` +
		`{"role":"system","content":[{"type":"text","text":"a system prompt of some length","prompt_cache_breakpoint":{"mode":"explicit"}}]},` +
		`{"role":"user","content":"and a question"}]}`
	if code, b := post(t, gw+"/v1/chat/completions", body, SessionHeader, "s1"); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if len(dirs.pins) != 2 || *dirs.pins[0].TTL != directive.TTL(30*time.Minute) || *dirs.pins[1].TTL != directive.TTL(24*time.Hour) ||
		dirs.pins[0].End >= dirs.pins[1].End {
		t.Fatalf("pins %+v, want the system message's for 30m and the prompt's for 24h", dirs.pins)
	}
	if n := counted(t, m.Pins.WithLabelValues(pinPinned)); n != 1 {
		t.Fatalf("%v pinned as asked, want 1", n)
	}
	if n := counted(t, m.Pins.WithLabelValues(pinClamped)); n != 1 {
		t.Fatalf("%v clamped, want 1 (24h granted 1h)", n)
	}
}
