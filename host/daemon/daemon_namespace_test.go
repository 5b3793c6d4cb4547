package daemon

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// nsTurn runs one engine request for tenant's session: every page it must
// prefill is written with tag (so its bytes are recognizable), committed
// and finished. It returns the match.
func nsTurn(t *testing.T, cl *engineclient.Client, tenant, session string, toks []uint32, tag byte) engineclient.MatchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cl.Match(ctx, engineclient.MatchRequest{Session: session, Tenant: tenant, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots := slices.Clone(m.PageSlots)
	if need := len(toks)/4 - len(slots); need > 0 {
		got, err := cl.Allocate(ctx, m.RequestID, need)
		if err != nil {
			t.Fatal(err)
		}
		page := make([]byte, cl.Device().Layout().PageBytes())
		for i := range page {
			page[i] = tag + byte(i%7)
		}
		for _, s := range got {
			if err := cl.Device().WritePage(int(s), page); err != nil {
				t.Fatal(err)
			}
		}
		slots = append(slots, got...)
	}
	if _, err := cl.Commit(ctx, m.RequestID, toks, slots); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
		t.Fatal(err)
	}
	return m
}

func readSlots(t *testing.T, cl *engineclient.Client, slots []uint32) [][]byte {
	t.Helper()
	out := make([][]byte, len(slots))
	for i, s := range slots {
		out[i] = make([]byte, cl.Device().Layout().PageBytes())
		if err := cl.Device().ReadPage(int(s), out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Tenants that index.share puts in one namespace share prefixes, hashed
// with the namespace's name; a tenant outside it does not. A splice of one
// sharer's session copies the shared pages instead of editing the other
// sharer's bytes in place.
func TestShareGroupSharesPrefixesOnly(t *testing.T) {
	c := modelConfig(t)
	c.Model.Name = ""
	c.Index.Share = map[string][]string{"team": {"alice", "bob"}}
	// Room on the device for every page of the test (alice's 4, carol's 4,
	// the splice's 2 copies and one more): the step loop evicts nothing,
	// so alice's pages stay in their slots and bob's splice finds its pages
	// on the device. With 8 pages, eviction raced the splice (it found no
	// free page, or cut the session short because the pages it had to move
	// had left the device, or alice's last page came back in another slot:
	// 4 of 30 runs under two CPU hogs).
	c.Tiers.Device.CapacityPages = 32
	d := startWithEngine(t, c)
	cl := dialEngine(t, c.EngineSocket(), tinyLayout(), false)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}

	if m := nsTurn(t, cl, "alice", "sa", toks, 10); m.CachedTokens != 0 {
		t.Fatalf("alice's first turn cached %d", m.CachedTokens)
	}
	mb := nsTurn(t, cl, "bob", "sb", toks, 20)
	if mb.CachedTokens != 16 {
		t.Fatalf("bob, sharing alice's namespace, cached %d of alice's 16 tokens", mb.CachedTokens)
	}
	want := blockid.Compute(toks, 4, blockid.Salt{Namespace: "team"}).Sequence
	if !slices.Equal(mb.BlockHashes, want) {
		t.Fatalf("bob's hashes %v, want the namespace-salted %v", mb.BlockHashes, want)
	}
	if m := nsTurn(t, cl, "carol", "sc", toks, 30); m.CachedTokens != 0 {
		t.Fatalf("carol, outside the share, cached %d", m.CachedTokens)
	}

	ma := nsTurn(t, cl, "alice", "sa", toks, 10)
	before := readSlots(t, cl, ma.PageSlots)
	// Bob evicts [4, 8) of his session: the pages after it move by -4 and
	// are re-rotated. They are alice's pages too, so they must be copied.
	r := d.core.in.Apply(context.Background(), directive.Turn{Source: "test", Tenant: "bob",
		Directives: []directive.Directive{directive.Evict{Session: "sb", Start: 4, End: 8}}})
	if !r.OK() {
		t.Fatalf("bob's evict: %+v", r)
	}
	after := readSlots(t, cl, ma.PageSlots)
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Fatalf("bob's splice changed alice's page %d (slot %d) in place", i, ma.PageSlots[i])
		}
	}
	if m := nsTurn(t, cl, "alice", "sa", toks, 10); m.CachedTokens != 16 || !slices.Equal(m.PageSlots, ma.PageSlots) {
		t.Fatalf("alice after bob's splice: cached %d slots %v, want 16 on %v", m.CachedTokens, m.PageSlots, ma.PageSlots)
	}
	edited := append(slices.Clone(toks[:4]), toks[8:]...)
	if m := nsTurn(t, cl, "bob", "sb", edited, 20); m.CachedTokens != 12 {
		t.Fatalf("bob's edited sequence cached %d, want 12", m.CachedTokens)
	}
}

// With index.namespace_salt off every tenant hashes into the one unsalted
// namespace, as a Dynamo router without a cache namespace computes.
func TestNamespaceSaltOffSharesAcrossTenants(t *testing.T) {
	c := modelConfig(t)
	c.Model.Name = ""
	c.Index.NamespaceSalt = false
	startWithEngine(t, c)
	cl := dialEngine(t, c.EngineSocket(), tinyLayout(), false)
	toks := []uint32{7, 7, 7, 7, 8, 8, 8, 8, 9}
	nsTurn(t, cl, "x", "s1", toks, 1)
	m := nsTurn(t, cl, "y", "s2", toks, 2)
	if m.CachedTokens != 8 || !slices.Equal(m.BlockHashes, blockid.Compute(toks, 4, blockid.Salt{}).Sequence) {
		t.Fatalf("tenant y cached %d with hashes %v, want 8 with unsalted hashes", m.CachedTokens, m.BlockHashes)
	}
}
