package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A connector saves a long prompt in several commits (vLLM prefills it in
// chunks). Were its committed staging pages unlocked after the first, the
// host could demote them under pressure and hand their slots to other
// pages, even back to the same request, and the next commit would be
// refused (invalid_slot: "does not hold that page", or "given twice").
// The committed path stays on the device until the prompt's last full
// page is committed; then it is unlocked, free to leave staging.
func TestChunkedSavesKeepTheirPathUntilThePromptIsCommitted(t *testing.T) {
	h := startHost(t, enginetest.Options{DevicePages: 8, DeviceHeadroom: -1, HostPages: 64})
	sched, worker := dialSchedulerAndWorker(t, h.Socket, "vllm-1", gqa(16))
	if !worker.Registration().Has(enginewire.FeatureCommitFirstPage) {
		t.Fatalf("registration %+v: the host does not announce %s", worker.Registration(), enginewire.FeatureCommitFirstPage)
	}
	ctx := ctxT(t)
	dev := worker.Device()
	toks := seq(1000, 16*6+3)
	m, err := sched.Match(ctx, engineclient.MatchRequest{Session: "a", Tokens: toks})
	if err != nil || m.CachedTokens != 0 {
		t.Fatalf("match: %+v %v", m, err)
	}
	first, err := worker.Allocate(ctx, m.RequestID, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range first {
		fillPage(t, dev, sl, tagByPage(i))
	}
	c0, err := worker.Commit(ctx, m.RequestID, toks, first)
	if err != nil {
		t.Fatal(err)
	}

	// Other requests fill staging over and over: the first chunk stays.
	for k := range 12 {
		runTurn(t, sched, "other", seq(5000+k*100, 16*4), tagByPage)
		time.Sleep(10 * time.Millisecond)
	}
	for i, hash := range c0.BlockHashes {
		if p, ok := h.Page("", hash); !ok || !p.Tiers.Has(tier.Device) || p.Loc[tier.Device] != uint64(first[i]) || p.LockRef == 0 {
			t.Fatalf("page %d of the half-saved prompt after the pressure: %+v (found %v), want locked in slot %d", i, p, ok, first[i])
		}
	}

	second, err := worker.Allocate(ctx, m.RequestID, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range second {
		fillPage(t, dev, sl, tagByPage(3+i))
	}
	c, err := worker.CommitFrom(ctx, m.RequestID, toks, 3, second)
	if err != nil || c.Stored != 3 || len(c.BlockHashes) != 6 {
		t.Fatalf("commit from page 3: %+v %v", c, err)
	}
	// The whole prompt is in: nothing of it is held for the request now.
	for i, hash := range c.BlockHashes {
		if p, ok := h.Page("", hash); !ok || p.LockRef != 0 {
			t.Fatalf("page %d after the prompt's last commit: %+v (found %v), want unlocked", i, p, ok)
		}
	}
	if _, err := sched.Release(ctx, m.RequestID); err != nil {
		t.Fatal(err)
	}

	// A fresh request finds all six pages, each with its own bytes.
	m2, err := sched.Match(ctx, engineclient.MatchRequest{Session: "b", Tokens: toks})
	if err != nil || m2.CachedTokens != 16*6 {
		t.Fatalf("match after the second commit: %+v %v, want 96 tokens", m2, err)
	}
	for i, sl := range m2.PageSlots {
		checkPage(t, dev, sl, tagByPage(i))
	}
	if _, err := sched.Release(ctx, m2.RequestID); err != nil {
		t.Fatal(err)
	}
}

// first_page may only skip pages the request matched or committed: the
// tokens alone do not say the engine computed them.
func TestCommitFromRefusesPagesTheRequestNeverHeld(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c, err := dialConnector(t, h.Socket, "vllm-1", gqa(16))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	toks := seq(7000, 16*4)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := c.Allocate(ctx, m.RequestID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots[:1]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		toks   []uint32
		first  int
		code   errcode.Code
		wanted string
	}{
		{"past what it committed", toks, 2, errcode.BadRequest, "only the first 1 pages"},
		{"other tokens", seq(9000, 16*4), 1, errcode.BadRequest, "only the first 0 pages"},
		{"more pages than the tokens hold", toks, 4, errcode.BadRequest, "only 4 full pages"},
	} {
		_, err := c.CommitFrom(ctx, m.RequestID, tc.toks, tc.first, slots[1:])
		e, ok := errcode.As(err)
		if !ok || e.Code != tc.code || !strings.Contains(err.Error(), tc.wanted) {
			t.Errorf("%s: %v, want %s mentioning %q", tc.name, err, tc.code, tc.wanted)
		}
	}
	if r, err := c.CommitFrom(ctx, m.RequestID, toks, 1, slots[1:]); err != nil || r.Stored != 1 {
		t.Fatalf("commit from page 1: %+v %v", r, err)
	}
	if _, err := c.Release(ctx, m.RequestID); err != nil {
		t.Fatal(err)
	}
	var unknown *errcode.Error
	_, err = c.CommitFrom(ctx, m.RequestID, toks, 1, slots[1:])
	if !errors.As(err, &unknown) || unknown.Code != errcode.UnknownRequest {
		t.Fatalf("commit after release: %v", err)
	}
}
