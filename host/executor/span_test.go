package executor

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels"
	"github.com/kvpilot/kvpilot/kernels/rope"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// spanEnv is an executor with a real splicer: a memfd device pool of
// devPages pages, CPU kernels, in-memory sessions and an engine that
// accepts every fill order.
type spanEnv struct {
	*env
	arena *memfd.Arena
	sess  *splice.MemorySessions
	sp    *splice.Splicer
	mu    sync.Mutex
	fills []splice.FillOrder
}

func newSpanEnv(t *testing.T, devPages int, mod ...func(*Config)) *spanEnv {
	t.Helper()
	lay := layout.MHA("m", page, layout.FP32, 1, 1, 4, 4, layout.HalfSplit)
	arena, err := memfd.New(memfd.Options{Tier: tier.Device, Layout: &lay, Pages: devPages, Arrangement: layout.LayerMajor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arena.Close() })
	dev, err := splice.NewDevice(arena, splice.Memory{Host: arena.Bytes()}, rope.Config{Base: 10000, Dim: 4, Pairing: rope.HalfSplit}, kernels.NewCPU())
	if err != nil {
		t.Fatal(err)
	}
	se := &spanEnv{arena: arena, sess: splice.NewMemorySessions(page, nil)}
	var g *guarded.Index // the executor's, which the splicer must share
	se.env = newEnv(t, func(c *Config) {
		g = c.Index
		for _, m := range mod {
			m(c)
		}
	})
	free := func(fs []cache.Freed) {
		for _, f := range fs {
			if f.Tier == tier.Device {
				if err := arena.Free(pool.Slot(f.Loc)); err != nil {
					t.Errorf("free %v: %v", f, err)
				}
			}
		}
	}
	se.sp, err = splice.New(splice.Config{Index: g, Device: dev, Sessions: se.sess, Free: free,
		Fill: func(_ context.Context, o splice.FillOrder) (splice.FillResult, error) {
			se.mu.Lock()
			defer se.mu.Unlock()
			se.fills = append(se.fills, o)
			return splice.FillResult{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the executor with the splicer (newEnv built one without).
	cfg := se.ex.cfg
	cfg.Attachments.Splicer, cfg.Attachments.Free = se.sp, free
	if se.ex, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return se
}

// prefill caches tokens' full pages in fresh device slots and records the
// session.
func (se *spanEnv) prefill(id string, tokens []uint32) blockid.Hashes {
	se.t.Helper()
	h := blockid.Compute(tokens, page, blockid.Salt{Namespace: ""})
	var m cache.MatchResult
	se.ix.MatchHashes("", h, &m)
	slots, err := se.arena.Alloc(nil, len(h.Sequence)-len(m.Pages))
	if err != nil {
		se.t.Fatal(err)
	}
	locs := make([]uint64, len(h.Sequence))
	for i := range locs {
		if i < len(m.Pages) {
			locs[i] = m.Pages[i].Loc[tier.Device]
		} else {
			locs[i] = uint64(slots[i-len(m.Pages)])
		}
	}
	var cr cache.CommitResult
	if err := se.ix.Commit("", h, locs, &cr); err != nil {
		se.t.Fatal(err)
	}
	se.sess.Put(splice.Session{ID: id, Tokens: tokens, Cached: len(h.Sequence) * page})
	return h
}

func (se *spanEnv) cachedPages(tokens []uint32) int {
	var m cache.MatchResult
	se.ix.Match("", blockid.Salt{}, tokens, &m)
	return len(m.Pages)
}

func (se *spanEnv) noLeak() {
	se.t.Helper()
	se.sp.Wait()
	if err := se.ix.Check(); err != nil {
		se.t.Fatal(err)
	}
	if used, idx := se.arena.Stats().Used, int64(se.ix.Stats().Tiers[tier.Device].Pages); used != idx {
		se.t.Fatalf("device pool %d slots allocated, index %d pages", used, idx)
	}
}

func TestSpliceDirective(t *testing.T) {
	se := newSpanEnv(t, 32)
	base := toks(100, 24) // 6 pages
	se.prefill("s", base)
	r := se.apply("", directive.Splice{Session: "s", Start: 5, End: 7, Replacement: directive.Replacement{Tokens: []uint32{1, 2, 3}}},
		directive.Evict{Session: "s", Start: 12, End: 14})
	mustOK(t, r)
	se.sp.Wait()
	want := slices.Concat(base[:5], []uint32{1, 2, 3}, base[7:12], base[14:])
	s, _ := se.sess.Session("s")
	if !slices.Equal(s.Tokens, want) || s.Cached != 20 {
		t.Fatalf("session %v cached %d, want %v cached 20 (5 full pages of 23 tokens)", s.Tokens, s.Cached, want)
	}
	if n := se.cachedPages(want); n != 5 {
		t.Fatalf("%d pages of the edited sequence cached, want 5", n)
	}
	if len(se.fills) != 1 || se.fills[0].Position != 5 || len(se.fills[0].PrefixPageSlots) != 1 || se.fills[0].FirstOffset != 1 {
		t.Fatalf("fills %+v", se.fills)
	}
	if r.Results[0].Effect.Blocks == 0 || r.Results[0].Effect.Tokens == 0 {
		t.Fatalf("effect %+v", r.Results[0].Effect)
	}
	if rec := se.ring.Records(); len(rec) < 2 || rec[len(rec)-2].Verb != "Splice" {
		t.Fatalf("audit %+v", rec)
	}
	se.noLeak()
}

// TestFailedSpliceTurnChangesNothing: the second session's splice does not
// fit the device pool, so the whole turn (a pin, a first splice) is undone.
func TestFailedSpliceTurnChangesNothing(t *testing.T) {
	se := newSpanEnv(t, 16) // 12 pages cached, 4 free: room for one splice of the two
	a := se.prefill("a", toks(100, 24))
	se.prefill("b", toks(500, 24))
	statsBefore, poolBefore := se.ix.Stats(), se.arena.Stats()
	r := se.apply("",
		directive.Cache{BlockHashes: hs(a.Sequence[0]), Pin: true},
		directive.Evict{Session: "a", Start: 5, End: 7},
		directive.Evict{Session: "b", Start: 5, End: 7})
	mustRefuse(t, r, 2, errcode.CapacityExhausted)
	if se.ix.Stats() != statsBefore || se.arena.Stats() != poolBefore {
		t.Fatalf("index or pool changed: %+v / %+v", se.ix.Stats(), se.arena.Stats())
	}
	if s, _ := se.sess.Session("a"); !slices.Equal(s.Tokens, toks(100, 24)) {
		t.Fatal("session a changed")
	}
	se.noLeak()
}

func TestEvictDefaultModeForget(t *testing.T) {
	se := newSpanEnv(t, 32, func(c *Config) { c.DefaultMode = directive.ModeForget })
	base := toks(100, 24)
	se.prefill("s", base)
	mustOK(t, se.apply("", directive.Evict{Session: "s", Start: 9, End: 10}))
	if n := se.cachedPages(base); n != 2 {
		t.Fatalf("%d pages left, want 2 (forget truncates at 9)", n)
	}
	se.noLeak()
}

// TestThinkInteriorPurge: purging a transient page with children splices
// it out of the session; the answer after it stays cached.
func TestThinkInteriorPurge(t *testing.T) {
	se := newSpanEnv(t, 32)
	base := toks(100, 24)
	h := se.prefill("s", base)
	think := hs(h.Sequence[2], h.Sequence[3]) // tokens [8, 16)
	mustOK(t, se.apply("", directive.Think{BlockHashes: think, Transient: true}))
	r := se.apply("", directive.Think{BlockHashes: think})
	mustOK(t, r)
	want := slices.Concat(base[:8], base[16:])
	if s, _ := se.sess.Session("s"); !slices.Equal(s.Tokens, want) {
		t.Fatalf("session %v, want the think span gone", s.Tokens)
	}
	if n := se.cachedPages(want); n != 4 {
		t.Fatalf("%d pages of the stripped sequence cached, want 4", n)
	}
	if se.ix.Contains("", h.Sequence[2]) || se.ix.Contains("", h.Sequence[3]) {
		t.Fatal("the think pages are still cached")
	}
	se.noLeak()

	// A transient interior page no session runs through cannot be re-hashed.
	other := se.commit("", toks(900, 12))
	mustOK(t, se.apply("", directive.Think{BlockHashes: hs(other.Sequence[1]), Transient: true}))
	mustRefuse(t, se.apply("", directive.Think{BlockHashes: hs(other.Sequence[1])}), 0, errcode.UnknownSession)
}

func TestSpanPinRetainResume(t *testing.T) {
	se := newSpanEnv(t, 32)
	h := se.prefill("s", toks(100, 24))
	r := se.apply("", directive.Pin{Session: "s", End: 10, TTL: ttlp(60)})
	mustOK(t, r)
	if se.info("", h.Sequence[1]).PinCount != 1 || se.info("", h.Sequence[2]).PinCount != 0 {
		t.Fatal("Pin [0, 10) must pin exactly pages 0 and 1")
	}
	mustOK(t, se.apply("", directive.Retain{Session: "s", Start: 12, End: 16, Priority: 70}))
	if p := se.info("", h.Sequence[3]); p.Priority != 70 || se.info("", h.Sequence[4]).Priority != 0 {
		t.Fatalf("Retain [12, 16): page 3 priority %d", p.Priority)
	}
	mustRefuse(t, se.apply("", directive.Pin{Session: "nope", End: 4}), 0, errcode.UnknownSession)
	mustRefuse(t, se.apply("", directive.Splice{Session: "s", Start: 4, End: 5, Replacement: directive.Replacement{Text: "hi"}}), 0, errcode.NotSupportedYet)

	mustOK(t, se.apply("", directive.Pause{BlockHashes: hs(h.Sequence[5]), LeaseID: "L"}))
	se.trans = nil
	r = se.apply("", directive.Resume{LeaseID: "L"})
	mustOK(t, r)
	if _, ok := se.ix.Lease("L"); ok {
		t.Fatal("the lease is still live after Resume")
	}
	if r.Results[0].Effect.LeaseID != "L" {
		t.Fatalf("effect %+v", r.Results[0].Effect)
	}
}

func ttlp(sec float64) *directive.TTL {
	v := directive.TTL(time.Duration(sec * float64(time.Second)))
	return &v
}
