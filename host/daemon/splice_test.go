package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func applyTurn(t *testing.T, d *Daemon, dirs ...directive.Directive) directive.TurnReply {
	t.Helper()
	return d.core.in.Apply(context.Background(), directive.Turn{Source: "test", Tenant: "acme", Directives: dirs})
}

func codeOf(r directive.TurnReply) errcode.Code {
	if r.Error != nil {
		return r.Error.Code
	}
	return ""
}

func dialEngine(t *testing.T, socket string, l enginewire.Layout, reset bool) *engineclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: socket, EngineID: t.Name(), Layout: l, Rope: engineclient.RopeConfig{Base: 10000}, ResetCache: reset})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Without a configured model the pools open at the engine's registration:
// until then Warm and the span verbs are unavailable and Stats reports no
// bytes; after it the mover and the splicer are attached, Stats bytes are
// pages times the layout's page bytes, and a new layout rebuilds both.
func TestAttachmentsFollowRegistration(t *testing.T) {
	c := modelConfig(t)
	c.Model.Name = ""
	d := startWithEngine(t, c)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	h := blockid.Compute(toks, 4, blockid.Salt{Namespace: "acme"})
	warm := directive.Warm{BlockKeys: []directive.BlockKey{directive.BlockKey(directive.Hash(h.Sequence[3]).String())}, TargetTier: "host"}
	// The page must be known for Warm to get as far as the pools: commit
	// it with made-up locations, and forget it before pools open.
	commitTokens(t, d, "acme", toks, 4)
	if r := applyTurn(t, d, warm); r.OK() || codeOf(r) != errcode.Unavailable {
		t.Fatalf("warm before any pools: %+v", r)
	}
	d.Index().Do(func(ix *cache.Index) { ix.Reset() })
	if r := applyTurn(t, d, directive.Evict{Session: "s", Start: 4, End: 8}); r.OK() || codeOf(r) != errcode.Unavailable {
		t.Fatalf("evict before any pools: %+v", r)
	}
	if d.BytesPerPage() != 0 {
		t.Fatalf("bytes per page %d before a layout", d.BytesPerPage())
	}

	cl := dialEngine(t, c.EngineSocket(), tinyLayout(), false)
	engineTurn(t, cl, toks, "")
	if r := applyTurn(t, d, warm); !r.OK() {
		t.Fatalf("warm after registration: %+v", r)
	}
	// Evict [4, 8) of the session (an empty replacement: no fill needed).
	if r := applyTurn(t, d, directive.Evict{Session: "s", Start: 4, End: 8}); !r.OK() {
		t.Fatalf("evict after registration: %+v", r)
	}
	sess, ok := d.Engine().Session("s")
	want := append(slices.Clone(toks[:4]), toks[8:]...)
	if !ok || !slices.Equal(sess.Tokens, want) || sess.CachedTokens != 12 {
		t.Fatalf("session after the evict: %v cached %d (%v)", sess.Tokens, sess.CachedTokens, ok)
	}
	if m := engineTurn(t, cl, want, ""); m.CachedTokens != 12 {
		t.Fatalf("turn on the edited sequence cached %d, want 12", m.CachedTokens)
	}
	ctl, err := controlclient.DialUnix(c.ControlSocket(), controlclient.UnixOptions{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ctl.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pageBytes := int64(2 * 2 * 4 * 8 * 2) // layers × (k, v) × page size × head dim × bf16
	if d.BytesPerPage() != pageBytes || st.Tiers[0].Pages == 0 || st.Tiers[0].Bytes != st.Tiers[0].Pages*pageBytes ||
		st.Tiers[0].CapacityBytes != int64(c.Tiers.Device.CapacityPages)*pageBytes {
		t.Fatalf("stats %+v, want bytes of %d-byte pages", st.Tiers[0], pageBytes)
	}

	// A new layout (fp32) with a reset: the pools reopen and the splicer
	// is rebuilt for them.
	cl.Close()
	l := tinyLayout()
	l.DType = "fp32"
	cl2 := dialEngine(t, c.EngineSocket(), l, true)
	engineTurn(t, cl2, toks, "")
	if d.BytesPerPage() != 2*pageBytes {
		t.Fatalf("bytes per page %d after the fp32 layout, want %d", d.BytesPerPage(), 2*pageBytes)
	}
	if r := applyTurn(t, d, directive.Evict{Session: "s", Start: 8, End: 12}); !r.OK() {
		t.Fatalf("evict on the new layout: %+v", r)
	}
	if m := engineTurn(t, cl2, append(slices.Clone(toks[:8]), toks[12:]...), ""); m.CachedTokens != 12 {
		t.Fatalf("turn on the new layout's edited sequence cached %d, want 12", m.CachedTokens)
	}
}

// The engine's requests reach the policies as observations built from real
// traffic: auto-pin pins a prefix two sessions' RequestStarted carried
// (block hashes) once a request on it finished, and think-evict marks the reasoning pages a
// RequestFinished reported (usage → reasoning blocks) transient. Both run
// as plugin processes.
func TestEngineTrafficReachesPolicies(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvpilot.yaml")
	yaml := "data_dir: " + filepath.Join(dir, "data") + "\nhttp: {listen: \"\"}\nnats: {listen: \"\"}\n" +
		"index: {page_size: 4}\ntiers: {device: {capacity_pages: 64}, host: {capacity_pages: 128}, disk: {capacity_pages: 0}, remote: {capacity_pages: 0}}\n" +
		"policy_runtime: {tick_interval: 50ms}\n" +
		"policies:\n  - {name: hot, builtin: auto-pin, params: {min_hits: 2, ttl: 1h}}\n  - {name: think, builtin: think-evict}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	d, stop := startWithPolicies(t, path)
	defer stop()
	cl := dialEngine(t, d.Config().EngineSocket(), tinyLayout(), false)
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	answer := []uint32{50, 51, 52, 53, 54, 55, 56, 57, 60, 61} // 8 reasoning tokens, then the answer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, session := range []string{"a", "b"} {
		m, err := cl.Match(ctx, engineclient.MatchRequest{Session: session, Tenant: "acme", Tokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		seq := append(slices.Clone(prompt), answer...)
		slots := slices.Clone(m.PageSlots)
		got, err := cl.Allocate(ctx, m.RequestID, len(seq)/4-len(slots))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Commit(ctx, m.RequestID, seq, append(slots, got...)); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID,
			Usage: engineclient.Usage{InputTokens: len(prompt), OutputTokens: len(answer), ReasoningTokens: 8}}); err != nil {
			t.Fatal(err)
		}
	}
	h := blockid.Compute(append(slices.Clone(prompt), answer[:8]...), 4, blockid.Salt{Namespace: "acme"})
	waitFor(t, "auto-pin to pin the shared prompt", func() bool {
		p, _ := pageInfo(d, "acme", h.Sequence[2])
		return p.PinCount > 0
	})
	waitFor(t, "think-evict to mark the reasoning pages transient", func() bool {
		p3, _ := pageInfo(d, "acme", h.Sequence[3])
		p4, _ := pageInfo(d, "acme", h.Sequence[4])
		return p3.Transient && p4.Transient
	})
	if p, _ := pageInfo(d, "acme", h.Sequence[2]); p.Transient {
		t.Fatal("a prompt page was marked transient")
	}
}
