package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// dialRanks registers a tensor-parallel connector engine as vLLM does: its
// scheduler, then one worker per rank, all declaring the ranks as parts.
func dialRanks(t *testing.T, socket string, ranks int) (sched *engineclient.Client, workers []*engineclient.Client) {
	t.Helper()
	dialOne := func() *engineclient.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := engineclient.Dial(ctx, engineclient.Options{Socket: socket, EngineID: "vllm-tp", Layout: gqa(16),
			Rope: engineclient.RopeConfig{Base: 10000}, Connector: true, Parts: ranks})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	sched = dialOne()
	for range ranks {
		w := dialOne()
		if w.Registration().ID != sched.Registration().ID || !w.Registration().Joined {
			t.Fatalf("rank's registration %+v, scheduler's %+v: want one, joined", w.Registration(), sched.Registration())
		}
		workers = append(workers, w)
	}
	if !sched.Registration().Has(enginewire.FeatureCommitParts) {
		t.Fatalf("the host does not announce %s", enginewire.FeatureCommitParts)
	}
	return sched, workers
}

// cachedTokens is what a fresh request of toks finds (the request is
// released again).
func cachedTokens(t *testing.T, c *engineclient.Client, toks []uint32) int {
	t.Helper()
	ctx := ctxT(t)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "probe", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, m.RequestID); err != nil {
		t.Fatal(err)
	}
	return m.CachedTokens
}

// Two ranks save a prompt in two chunks, their commits interleaved as
// their save threads run them: every rank is handed the same slots for a
// chunk, and a chunk is cached only once both ranks committed it. The
// pages come back whole to a later request.
func TestPagesWrittenInPartsAreCachedOnceEveryRankCommits(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	sched, ranks := dialRanks(t, h.Socket, 2)
	ctx := ctxT(t)
	toks := seq(3000, 16*5+3)
	m, err := sched.Match(ctx, engineclient.MatchRequest{Session: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(rank, pages, first int) []uint32 {
		t.Helper()
		s, err := ranks[rank].AllocatePart(ctx, m.RequestID, pages, first, rank+1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	commit := func(rank, first int, slots []uint32, waiting int) {
		t.Helper()
		r, err := ranks[rank].CommitPart(ctx, m.RequestID, toks, first, slots, rank+1)
		if err != nil || r.PartsWaiting != waiting {
			t.Fatalf("rank %d commits from page %d: %+v %v, want %d parts waiting", rank, first, r, err, waiting)
		}
	}
	a0, a1 := allocate(0, 3, 0), allocate(1, 3, 0)
	if !slices.Equal(a0, a1) {
		t.Fatalf("ranks allocated %v and %v for the same pages", a0, a1)
	}
	for i, sl := range a0 {
		fillPage(t, ranks[0].Device(), sl, tagByPage(i)) // both ranks' slices, for the test
	}
	commit(0, 0, a0, 1)
	if n := cachedTokens(t, sched, toks); n != 0 {
		t.Fatalf("after one rank's commit a request finds %d tokens, want none", n)
	}
	// Rank 0 runs ahead to its second chunk before rank 1 commits the first.
	b0 := allocate(0, 2, 3)
	for i, sl := range b0 {
		fillPage(t, ranks[0].Device(), sl, tagByPage(3+i))
	}
	commit(0, 3, b0, 1)
	commit(1, 0, a1, 0)
	if n := cachedTokens(t, sched, toks); n != 16*3 {
		t.Fatalf("after both ranks committed the first chunk a request finds %d tokens, want 48", n)
	}
	b1 := allocate(1, 2, 3)
	if !slices.Equal(b0, b1) {
		t.Fatalf("ranks allocated %v and %v for the second chunk", b0, b1)
	}
	commit(1, 3, b1, 0)
	if _, err := sched.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
		t.Fatal(err)
	}
	m2, err := sched.Match(ctx, engineclient.MatchRequest{Session: "b", Tokens: toks})
	if err != nil || m2.CachedTokens != 16*5 {
		t.Fatalf("a later request: %+v %v, want 80 tokens", m2, err)
	}
	for i, sl := range m2.PageSlots {
		checkPage(t, ranks[1].Device(), sl, tagByPage(i))
	}
	if _, err := sched.Release(ctx, m2.RequestID); err != nil {
		t.Fatal(err)
	}
}

// A rank whose save failed never commits: the pages stay uncached for
// every rank, and their slots go back to the pool when the request ends
// (the host's invariants, checked at cleanup, count them).
func TestARankThatNeverCommitsLeavesThePagesUncached(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	sched, ranks := dialRanks(t, h.Socket, 2)
	ctx := ctxT(t)
	toks := seq(4000, 16*4)
	m, err := sched.Match(ctx, engineclient.MatchRequest{Session: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := ranks[1].AllocatePart(ctx, m.RequestID, 4, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ranks[1].CommitPart(ctx, m.RequestID, toks, 0, slots, 2); err != nil || r.PartsWaiting != 1 {
		t.Fatalf("rank 1's commit: %+v %v", r, err)
	}
	if freed, err := sched.Release(ctx, m.RequestID); err != nil || freed != 4 {
		t.Fatalf("release: %d slots freed, %v; want the 4 the ranks shared", freed, err)
	}
	if n := cachedTokens(t, sched, toks); n != 0 {
		t.Fatalf("a later request finds %d tokens, want none", n)
	}
}

// What a rank may not do: name a part the registration lacks, commit into
// other slots than the parts were given, commit twice, commit other
// tokens than another rank, or ask another size for the same pages.
func TestPartsRefuseInconsistentCalls(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	sched, ranks := dialRanks(t, h.Socket, 2)
	ctx := ctxT(t)
	toks := seq(5000, 16*4)
	m, err := sched.Match(ctx, engineclient.MatchRequest{Session: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := ranks[0].AllocatePart(ctx, m.RequestID, 2, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ranks[0].CommitPart(ctx, m.RequestID, toks, 0, slots, 1); err != nil {
		t.Fatal(err)
	}
	other := seq(9000, 16*4)
	for _, tc := range []struct {
		name   string
		call   func() error
		code   errcode.Code
		wanted string
	}{
		{"part 3 of 2", func() error { _, err := ranks[1].AllocatePart(ctx, m.RequestID, 2, 0, 3); return err }, errcode.BadRequest, "has 2 part(s)"},
		{"another size", func() error { _, err := ranks[1].AllocatePart(ctx, m.RequestID, 3, 0, 2); return err }, errcode.BadRequest, "another part allocated 2"},
		{"other slots", func() error {
			_, err := ranks[1].CommitPart(ctx, m.RequestID, toks, 0, []uint32{slots[1], slots[0]}, 2)
			return err
		}, errcode.InvalidSlot, "the parts were allocated"},
		{"twice", func() error { _, err := ranks[0].CommitPart(ctx, m.RequestID, toks, 0, slots, 1); return err }, errcode.BadRequest, "twice"},
		{"other tokens", func() error { _, err := ranks[1].CommitPart(ctx, m.RequestID, other, 0, slots, 2); return err }, errcode.BadRequest, "other tokens"},
		{"never allocated", func() error { _, err := ranks[1].CommitPart(ctx, m.RequestID, toks, 2, slots, 2); return err }, errcode.InvalidSlot, "which no part allocated"},
	} {
		err := tc.call()
		e, ok := errcode.As(err)
		if !ok || e.Code != tc.code || !strings.Contains(err.Error(), tc.wanted) {
			t.Errorf("%s: %v, want %s mentioning %q", tc.name, err, tc.code, tc.wanted)
		}
	}
	// The refusals left the save as it was: rank 1's commit completes it.
	if r, err := ranks[1].CommitPart(ctx, m.RequestID, toks, 0, slots, 2); err != nil || r.PartsWaiting != 0 || r.Stored != 2 {
		t.Fatalf("rank 1's commit after the refusals: %+v %v", r, err)
	}
	if _, err := sched.Release(ctx, m.RequestID); err != nil {
		t.Fatal(err)
	}
}

// Parts are a connector-mode registration's, and every process of the
// engine must declare the same count: a process declaring another does
// not join (it registers anew, as one of another engine would).
func TestPartsAreDeclaredAlikeAndOnlyForConnectors(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, EngineID: "arena", Layout: gqa(16),
		Rope: engineclient.RopeConfig{Base: 10000}, Parts: 2})
	if e, ok := errcode.As(err); !ok || e.Code != errcode.BadRequest || !strings.Contains(err.Error(), "connector mode") {
		t.Fatalf("an arena engine in 2 parts: %v, want bad_request", err)
	}
	sched, _ := dialRanks(t, h.Socket, 2)
	one, err := dialConnector(t, h.Socket, "vllm-tp", gqa(16))
	if err != nil {
		t.Fatal(err)
	}
	if one.Registration().Joined || one.Registration().ID == sched.Registration().ID {
		t.Fatalf("a one-part process of the same engine id joined the two-part registration: %+v", one.Registration())
	}
}
