package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

func TestMatchIsPageAligned(t *testing.T) {
	h := newHarness(t)
	toks := tokens(100, 3*testPage+2) // three full pages and a partial one
	hs := h.commit("a", toks)
	if len(hs.Sequence) != 3 {
		t.Fatalf("committed %d pages, want 3 (a partial page is never cached)", len(hs.Sequence))
	}
	cases := []struct {
		name  string
		toks  []uint32
		pages int
	}{
		{"empty", nil, 0},
		{"shorter than a page", toks[:testPage-1], 0},
		{"exactly one page", toks[:testPage], 1},
		{"one page and a bit", toks[:testPage+1], 1},
		{"whole prompt", toks, 3},
		{"longer prompt", cat(toks, tokens(900, 2*testPage)), 3},
		{"diverges in page 2", cat(toks[:testPage+1], tokens(7000, 3*testPage)), 1},
		{"diverges in page 1", tokens(101, 3*testPage), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := h.match("a", c.toks)
			if len(got) != c.pages {
				t.Fatalf("matched %d pages, want %d", len(got), c.pages)
			}
			for i, p := range got {
				if p.Seq != hs.Sequence[i] || p.Local != hs.Local[i] {
					t.Fatalf("page %d: hashes %d/%d, want %d/%d", i, p.Seq, p.Local, hs.Sequence[i], hs.Local[i])
				}
				if !p.Tiers.Has(tier.Device) || p.Loc[tier.Device] == 0 {
					t.Fatalf("page %d: not reported on device: %+v", i, p)
				}
			}
		})
	}
}

func TestMatchHashesMatchesBlockID(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 5*testPage)
	salt := blockid.Salt{Namespace: "ns", LoRA: "adapter"}
	h.commitSalt("ns", salt, toks)
	want := blockid.Compute(toks, testPage, salt)
	var m MatchResult
	h.ix.MatchHashes("ns", want, &m)
	if len(m.Pages) != 5 {
		t.Fatalf("matched %d pages by hashes, want 5", len(m.Pages))
	}
	// The same tokens under another LoRA are another cache entry.
	h.ix.Match("ns", blockid.Salt{Namespace: "ns"}, toks, &m)
	if len(m.Pages) != 0 {
		t.Fatalf("matched %d pages under a different salt, want 0", len(m.Pages))
	}
	// Out-of-order hashes stop the match where the chain breaks.
	broken := blockid.Hashes{Local: append([]uint64(nil), want.Local...), Sequence: append([]uint64(nil), want.Sequence...)}
	broken.Sequence[2], broken.Local[2] = broken.Sequence[3], broken.Local[3]
	h.ix.MatchHashes("ns", broken, &m)
	if len(m.Pages) != 2 {
		t.Fatalf("matched %d pages over a broken chain, want 2", len(m.Pages))
	}
}

func TestTenantIsolation(t *testing.T) {
	h := newHarness(t)
	toks := tokens(5, 2*testPage)
	// The same salt under two tenant names gives identical hashes; the
	// tenants must still not see each other's pages.
	salt := blockid.Salt{}
	a := h.commitSalt("a", salt, toks)
	var m MatchResult
	h.ix.Match("b", salt, toks, &m)
	if len(m.Pages) != 0 {
		t.Fatalf("tenant b matched %d pages of tenant a", len(m.Pages))
	}
	if h.ix.Contains("b", a.Sequence[0]) {
		t.Fatal("tenant b sees tenant a's sequence hash")
	}
	if _, err := h.ix.Pin(TargetHashes("b", a.Sequence...), time.Minute); err == nil {
		t.Fatal("tenant b pinned tenant a's pages")
	} else {
		wantErr(t, err, ErrUnknownBlock)
	}
	b := h.commitSalt("b", salt, toks)
	if b.Sequence[1] != a.Sequence[1] {
		t.Fatal("test needs colliding hashes across tenants")
	}
	if _, err := h.ix.Pin(TargetHashes("b", b.Sequence[1]), time.Minute); err != nil {
		t.Fatal(err)
	}
	if h.info("a", a.Sequence[1]).PinCount != 0 {
		t.Fatal("pinning tenant b's page pinned tenant a's page with the same hash")
	}
	if got := h.ix.Stats().Pages; got != 4 {
		t.Fatalf("%d pages, want 2 per tenant", got)
	}
}

func TestMatchTouchesAndRefreshesPins(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 3*testPage)
	hs := h.commit("a", toks)
	if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[1]), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	pinnedAt := h.clock.Now()
	h.clock.Advance(8 * time.Second)
	h.match("a", toks)
	now := h.clock.Now()
	for i, seq := range hs.Sequence {
		pi := h.info("a", seq)
		if pi.LastAccess != now {
			t.Fatalf("page %d: last access %v, want %v", i, pi.LastAccess, now)
		}
		if i <= 1 && pi.PinExpiry != now+10*time.Second {
			t.Fatalf("page %d: pin expiry %v, want refreshed to %v", i, pi.PinExpiry, now+10*time.Second)
		}
	}
	if pi := h.info("a", hs.Sequence[2]); pi.PinCount != 0 {
		t.Fatalf("unpinned page got a pin on hit: %+v", pi)
	}
	// A hit after the pin lapsed does not resurrect it.
	h.clock.Advance(11 * time.Second)
	h.match("a", toks)
	if pi := h.info("a", hs.Sequence[1]); pi.PinCount != 0 {
		t.Fatalf("lapsed pin survived a hit: %+v (pinned at %v)", pi, pinnedAt)
	}
	if h.ix.Stats().PinnedPages != 0 {
		t.Fatal("lapsed pins still counted after a hit cleared them")
	}
}

func TestMatchUnknownTenant(t *testing.T) {
	h := newHarness(t)
	if got := h.match("nobody", tokens(0, 4*testPage)); len(got) != 0 {
		t.Fatalf("matched %d pages in an empty index", len(got))
	}
	if _, ok := h.ix.Lookup("nobody", 1); ok {
		t.Fatal("lookup found a page in an empty index")
	}
}

func TestMatchReusesBuffers(t *testing.T) {
	if invariantsOn {
		t.Skip("-tags invariants runs the checker on every match, and the checker allocates: run without the tag (go test -run TestMatchReusesBuffers ./host/cache/)")
	}
	h := newHarness(t, func(c *Config) { c.Tiers[tier.Device].Capacity = 1 << 12 })
	toks := tokens(1, 64*testPage)
	h.commit("a", toks)
	var m MatchResult
	salt := blockid.Salt{Namespace: "a"}
	h.ix.Match("a", salt, toks, &m)
	allocs := testing.AllocsPerRun(50, func() { h.ix.Match("a", salt, toks, &m) })
	if allocs != 0 {
		t.Fatalf("steady-state match allocates %v times", allocs)
	}
}
