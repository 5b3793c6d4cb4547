package engine_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func TestMain(m *testing.M) {
	enginetest.MaybeHostMain()
	os.Exit(m.Run())
}

// gqa is a small grouped-query layout: K and V of 2 heads × 8, fully rotary.
func gqa(pageSize int) enginewire.Layout {
	return enginewire.Layout{
		Model: "tiny-gqa", PageSize: pageSize, DType: "fp32", Layers: 2,
		Buffers: []enginewire.Buffer{{Name: "k", Heads: 2, HeadDim: 8}, {Name: "v", Heads: 2, HeadDim: 8}},
		Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"},
	}
}

func startHost(t *testing.T, o enginetest.Options) *enginetest.Host {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	h, err := enginetest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Check(); err != nil {
			t.Error(err)
		}
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	return h
}

func dial(t *testing.T, socket string, l enginewire.Layout) *engineclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := engineclient.Dial(ctx, engineclient.Options{Socket: socket, EngineID: t.Name(), Layout: l, Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// fillPage writes a recognizable byte pattern into a device page.
func fillPage(t *testing.T, a *engineclient.Arena, slot uint32, tag byte) {
	t.Helper()
	page := make([]byte, a.Layout().PageBytes())
	for i := range page {
		page[i] = tag + byte(i%7)
	}
	if err := a.WritePage(int(slot), page); err != nil {
		t.Fatal(err)
	}
}

func checkPage(t *testing.T, a *engineclient.Arena, slot uint32, tag byte) {
	t.Helper()
	page := make([]byte, a.Layout().PageBytes())
	if err := a.ReadPage(int(slot), page); err != nil {
		t.Fatal(err)
	}
	for i := range page {
		if page[i] != tag+byte(i%7) {
			t.Fatalf("slot %d byte %d = %d, want %d", slot, i, page[i], tag+byte(i%7))
		}
	}
}

// runTurn matches, allocates, writes and commits every full page, then
// finishes; it returns the cached tokens the match found.
func runTurn(t *testing.T, c *engineclient.Client, session string, toks []uint32, tagOf func(page int) byte) int {
	t.Helper()
	ctx := ctxT(t)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: session, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	ps := c.Registration().PageSize
	full := len(toks) / ps
	cachedPages := m.CachedTokens / ps
	dev := c.Device()
	for i, sl := range m.PageSlots {
		checkPage(t, dev, sl, tagOf(i))
	}
	slots := append([]uint32(nil), m.PageSlots...)
	if need := full - cachedPages; need > 0 {
		got, err := c.Allocate(ctx, m.RequestID, need)
		if err != nil {
			t.Fatal(err)
		}
		for i, sl := range got {
			fillPage(t, dev, sl, tagOf(cachedPages+i))
		}
		slots = append(slots, got...)
	}
	if full > 0 {
		if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
		t.Fatal(err)
	}
	return m.CachedTokens
}

func tagByPage(p int) byte { return byte(10 + 3*p) }

func TestSecondTurnHits(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	turn1 := seq(100, 16*4+5)
	if got := runTurn(t, c, "s1", turn1, tagByPage); got != 0 {
		t.Fatalf("first turn cached %d tokens", got)
	}
	turn2 := append(append([]uint32(nil), turn1...), seq(900, 40)...)
	if got := runTurn(t, c, "s1", turn2, tagByPage); got != 16*4 {
		t.Fatalf("second turn cached %d tokens, want %d", got, 64)
	}
	sess, ok := h.Service.Session("s1")
	if !ok || len(sess.Tokens) != len(turn2) || sess.CachedTokens != 16*(len(turn2)/16) {
		t.Fatalf("session = %+v %v", sess.CachedTokens, ok)
	}
	if st := h.Service.Stats(); st.Running != 0 {
		t.Fatalf("%d requests still running", st.Running)
	}
}

func TestBadInputIsStructured(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	ctx := ctxT(t)
	codeOf := func(err error) errcode.Code {
		if e, ok := errcode.As(err); ok {
			return e.Code
		}
		t.Fatalf("not a registry error: %v", err)
		return ""
	}
	if _, err := c.Allocate(ctx, "nope", 1); codeOf(err) != errcode.UnknownRequest {
		t.Fatalf("unknown request: %v", err)
	}
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "s", Tokens: seq(0, 40)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Allocate(ctx, m.RequestID, 0); codeOf(err) != errcode.BadRequest {
		t.Fatalf("zero pages: %v", err)
	}
	if _, err := c.Allocate(ctx, m.RequestID, 1<<20); codeOf(err) != errcode.BadRequest {
		t.Fatalf("huge allocation: %v", err)
	}
	slots, err := c.Allocate(ctx, m.RequestID, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]uint32{{slots[0], 9999}, {slots[0], slots[0]}, {slots[0], slots[1] + 1}} {
		if _, err := c.Commit(ctx, m.RequestID, seq(0, 40), bad); codeOf(err) != errcode.InvalidSlot {
			t.Fatalf("commit %v: %v", bad, err)
		}
	}
	if _, err := c.Commit(ctx, m.RequestID, seq(0, 40), []uint32{slots[0], slots[1], slots[1]}); codeOf(err) != errcode.BadRequest {
		t.Fatalf("more slots than pages: %v", err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControlJSON: `{"cache_control":{"type":"persistent"}}`}); codeOf(err) != errcode.BadRequest {
		t.Fatalf("bad cache_control: %v", err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControlJSON: `{"cache_control":{"type":"ephemeral","ttl":"soon"}}`}); codeOf(err) != errcode.InvalidTTL {
		t.Fatalf("bad ttl: %v", err)
	}
	if n, err := c.Release(ctx, m.RequestID); err != nil || n != 2 {
		t.Fatalf("release freed %d: %v", n, err)
	}
	if _, err := c.Release(ctx, m.RequestID); codeOf(err) != errcode.UnknownRequest {
		t.Fatalf("second release: %v", err)
	}
	if _, err := c.Match(ctx, engineclient.MatchRequest{Session: "s\x00", Tokens: seq(0, 4)}); codeOf(err) != errcode.BadRequest {
		t.Fatalf("unprintable session: %v", err)
	}
	if _, err := c.Match(ctx, engineclient.MatchRequest{Tokens: seq(0, 4), Messages: []chat.Message{{Role: "user", Span: chat.Span{Start: 2, End: 9}}}}); codeOf(err) != errcode.InvalidSpan {
		t.Fatalf("message span past the prompt: %v", err)
	}
	dev := h.Service.Pools().Set.Memory(tier.Device).Stats()
	if dev.Used != 0 {
		t.Fatalf("%d device slots leaked", dev.Used)
	}
}

func TestWrongLayoutRefused(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	ctx := ctxT(t)
	bad := gqa(8) // the host's pages are 16 tokens
	_, err := engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, Layout: bad, Rope: engineclient.RopeConfig{Base: 10000}})
	if !errors.Is(err, errcode.ErrInvalidLayout) {
		t.Fatalf("page size mismatch: %v", err)
	}
	noBase := gqa(16)
	_, err = engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, Layout: noBase})
	if !errors.Is(err, errcode.ErrInvalidLayout) {
		t.Fatalf("rope without base: %v", err)
	}
	c := dial(t, h.Socket, gqa(16))
	runTurn(t, c, "s", seq(0, 48), tagByPage)
	other := gqa(16)
	other.Buffers[1].HeadDim = 16
	_, err = engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, Layout: other, Rope: engineclient.RopeConfig{Base: 10000}})
	if !errors.Is(err, errcode.ErrLayoutConflict) {
		t.Fatalf("other layout with pages cached: %v", err)
	}
	c2, err := engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, Layout: other, Rope: engineclient.RopeConfig{Base: 10000}, ResetCache: true})
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	defer c2.Close()
	if st := h.IndexStats(); st.Pages != 0 {
		t.Fatalf("%d pages after a reset", st.Pages)
	}
	if c2.Device().SizeBytes == c.Device().SizeBytes {
		t.Fatal("the pools were not reopened for the new layout")
	}
}
