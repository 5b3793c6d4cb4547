package engine_test

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// tenantTurn caches toks for tenant under session and returns the match
// and the slots the request committed.
func tenantTurn(t *testing.T, c *engineclient.Client, tenant, session string, toks []uint32, tag byte) (engineclient.MatchResult, []uint32) {
	t.Helper()
	ctx := ctxT(t)
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: session, Tenant: tenant, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots := append([]uint32(nil), m.PageSlots...)
	if need := len(toks)/16 - len(slots); need > 0 {
		got, err := c.Allocate(ctx, m.RequestID, need)
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range got {
			fillPage(t, c.Device(), sl, tag)
		}
		slots = append(slots, got...)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
		t.Fatal(err)
	}
	return m, slots
}

// An engine request for tenant B never gets tenant A's pages from Match,
// even for the same tokens under the same session id: B's first turn is a
// miss, B's pages get slots of their own, and each tenant's later turns
// hit its own slots with its own bytes.
func TestMatchNeverCrossesTenants(t *testing.T) {
	h := startHost(t, enginetest.Options{})
	c := dial(t, h.Socket, gqa(16))
	toks := seq(100, 64)
	if m, _ := tenantTurn(t, c, "a", "shared-id", toks, 50); m.CachedTokens != 0 {
		t.Fatalf("a's first turn cached %d", m.CachedTokens)
	}
	mb, slotsB := tenantTurn(t, c, "b", "shared-id", toks, 90)
	if mb.CachedTokens != 0 || len(mb.PageSlots) != 0 {
		t.Fatalf("b's first turn on a's tokens got %d cached tokens, slots %v", mb.CachedTokens, mb.PageSlots)
	}
	ma, slotsA := tenantTurn(t, c, "a", "shared-id", toks, 50)
	if ma.CachedTokens != 64 {
		t.Fatalf("a's second turn cached %d, want 64", ma.CachedTokens)
	}
	mine := map[uint32]bool{}
	for _, s := range slotsA {
		mine[s] = true
	}
	for _, s := range slotsB {
		if mine[s] {
			t.Fatalf("a and b share device slot %d", s)
		}
	}
	for _, s := range ma.PageSlots {
		checkPage(t, c.Device(), s, 50)
	}
	mb2, _ := tenantTurn(t, c, "b", "shared-id", toks, 90)
	if mb2.CachedTokens != 64 {
		t.Fatalf("b's second turn cached %d, want 64", mb2.CachedTokens)
	}
	for _, s := range mb2.PageSlots {
		if mine[s] {
			t.Fatalf("b's match returned a's slot %d", s)
		}
		checkPage(t, c.Device(), s, 90)
	}
	if ma.BlockHashes[0] == mb.BlockHashes[0] {
		t.Fatalf("tenants a and b share block hash %x", ma.BlockHashes[0])
	}
}
