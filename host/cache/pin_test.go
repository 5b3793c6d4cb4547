package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

func pinCounts(h *harness, tenant string, seqs []uint64) []int {
	out := make([]int, len(seqs))
	for i, s := range seqs {
		out[i] = h.info(tenant, s).PinCount
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPinLeafProtectsAncestors(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 4*testPage))
	res, err := h.ix.Pin(TargetHashes("a", hs.Sequence[2]), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages != 3 || res.NewlyPinned != 3 || res.Unknown != 0 {
		t.Fatalf("pin result %+v, want the leaf and its two ancestors", res)
	}
	if got := pinCounts(h, "a", hs.Sequence); !equalInts(got, []int{1, 1, 1, 0}) {
		t.Fatalf("pin counts %v", got)
	}
	if st := h.ix.Stats(); st.PinnedPages != 3 || st.Tiers[tier.Device].Pinned != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDoublePinNeedsDoubleUnpin(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 2*testPage))
	tgt := TargetHashes("a", hs.Sequence[1])
	for i := 0; i < 2; i++ {
		if _, err := h.ix.Pin(tgt, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got := pinCounts(h, "a", hs.Sequence); !equalInts(got, []int{2, 2}) {
		t.Fatalf("after two pins %v", got)
	}
	res, err := h.ix.Unpin(tgt)
	if err != nil || res.Pages != 2 || res.Cleared != 0 {
		t.Fatalf("first unpin %+v %v", res, err)
	}
	if h.ix.Stats().PinnedPages != 2 {
		t.Fatal("one unpin of a double pin released it")
	}
	res, err = h.ix.Unpin(tgt)
	if err != nil || res.Pages != 2 || res.Cleared != 2 {
		t.Fatalf("second unpin %+v %v", res, err)
	}
	// A third unpin finds nothing pinned and changes nothing.
	res, err = h.ix.Unpin(tgt)
	if err != nil || res.Pages != 0 || res.NotPinned != 1 {
		t.Fatalf("third unpin %+v %v", res, err)
	}
	if got := pinCounts(h, "a", hs.Sequence); !equalInts(got, []int{0, 0}) {
		t.Fatalf("after unpins %v", got)
	}
}

func TestUnpinNeverStealsSharedAncestorPins(t *testing.T) {
	h := newHarness(t)
	base := tokens(1, testPage)
	x := h.commit("a", cat(base, tokens(100, testPage)))
	y := h.commit("a", cat(base, tokens(200, testPage)))
	if _, err := h.ix.Pin(TargetHashes("a", x.Sequence[1]), time.Minute); err != nil {
		t.Fatal(err)
	}
	// y's leaf was never pinned: unpinning it must not release the shared
	// root page that x's pin holds.
	res, err := h.ix.Unpin(TargetHashes("a", y.Sequence[1]))
	if err != nil || res.NotPinned != 1 || res.Pages != 0 {
		t.Fatalf("unpin of an unpinned sibling: %+v %v", res, err)
	}
	if h.info("a", x.Sequence[0]).PinCount != 1 {
		t.Fatal("shared ancestor lost its pin")
	}
	// Pin both leaves: the shared page counts two references.
	if _, err := h.ix.Pin(TargetHashes("a", y.Sequence[1]), time.Minute); err != nil {
		t.Fatal(err)
	}
	if h.info("a", x.Sequence[0]).PinCount != 2 {
		t.Fatal("shared ancestor should hold two pin references")
	}
	if _, err := h.ix.Unpin(TargetHashes("a", x.Sequence[1])); err != nil {
		t.Fatal(err)
	}
	if got := pinCounts(h, "a", []uint64{x.Sequence[0], x.Sequence[1], y.Sequence[1]}); !equalInts(got, []int{1, 0, 1}) {
		t.Fatalf("after unpinning x: %v", got)
	}
}

func TestPinExpiryIsMaxAndLazy(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 2*testPage))
	tgt := TargetHashes("a", hs.Sequence[1])
	t0 := h.clock.Now()
	if _, err := h.ix.Pin(tgt, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ix.Pin(tgt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	pi := h.info("a", hs.Sequence[1])
	if pi.PinExpiry != t0+time.Minute || pi.PinTTL != time.Minute {
		t.Fatalf("a shorter pin shortened the expiry: %+v", pi)
	}
	h.clock.Advance(30 * time.Second)
	if _, err := h.ix.Pin(tgt, time.Minute); err != nil {
		t.Fatal(err)
	}
	if pi := h.info("a", hs.Sequence[1]); pi.PinExpiry != h.clock.Now()+time.Minute || pi.PinCount != 3 {
		t.Fatalf("a longer pin did not extend: %+v", pi)
	}
	// Past the expiry the pin is lapsed but still counted until met.
	h.clock.Advance(2 * time.Minute)
	if h.ix.Stats().PinnedPages != 2 {
		t.Fatal("lapsed pins should be cleared lazily, not eagerly")
	}
	sw := h.ix.Sweep(h.clock.Now())
	if sw.Pins != 2 || h.ix.Stats().PinnedPages != 0 {
		t.Fatalf("sweep %+v, pinned %d", sw, h.ix.Stats().PinnedPages)
	}
	if pi := h.info("a", hs.Sequence[1]); pi.PinCount != 0 {
		t.Fatalf("swept pin left a count: %+v", pi)
	}
}

func TestPinBudgetFailsWhole(t *testing.T) {
	// Device 16 pages at fraction 0.5: at most 8 distinct pinned pages.
	h := newHarness(t)
	a := h.commit("a", tokens(1, 6*testPage))
	b := h.commit("a", tokens(500, 4*testPage))
	if _, err := h.ix.Pin(TargetHashes("a", a.Sequence[5]), time.Minute); err != nil {
		t.Fatal(err)
	}
	before := pinCounts(h, "a", b.Sequence)
	_, err := h.ix.Pin(TargetHashes("a", b.Sequence[3]), time.Minute)
	wantErr(t, err, ErrPinBudget)
	if got := pinCounts(h, "a", b.Sequence); !equalInts(got, before) {
		t.Fatalf("a failed pin changed counts: %v -> %v", before, got)
	}
	if h.ix.Stats().PinnedPages != 6 {
		t.Fatal("a failed pin changed the pinned total")
	}
	// Re-pinning pinned pages costs no budget.
	if _, err := h.ix.Pin(TargetHashes("a", a.Sequence[5]), time.Minute); err != nil {
		t.Fatalf("re-pin within budget: %v", err)
	}
	// Two more fit exactly.
	if _, err := h.ix.Pin(TargetHashes("a", b.Sequence[1]), time.Minute); err != nil {
		t.Fatalf("pin to the budget: %v", err)
	}
	// Once the first pin lapses, its budget is reclaimed by the retry sweep.
	h.clock.Advance(2 * time.Minute)
	if _, err := h.ix.Pin(TargetHashes("a", b.Sequence[3]), time.Minute); err != nil {
		t.Fatalf("pin after lapse: %v", err)
	}
}

func TestTenantQuota(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.TenantPinQuota = 2
		c.TenantQuotas = map[string]int{"vip": 5}
	})
	a := h.commit("a", tokens(1, 3*testPage))
	v := h.commit("vip", tokens(1, 3*testPage))
	_, err := h.ix.Pin(TargetHashes("a", a.Sequence[2]), time.Minute)
	wantErr(t, err, ErrTenantQuota)
	if _, err := h.ix.Pin(TargetHashes("a", a.Sequence[1]), time.Minute); err != nil {
		t.Fatalf("pin within quota: %v", err)
	}
	if _, err := h.ix.Pin(TargetHashes("vip", v.Sequence[2]), time.Minute); err != nil {
		t.Fatalf("vip override: %v", err)
	}
}

func TestPinRejects(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 2*testPage))
	cases := []struct {
		name    string
		target  Target
		ttl     time.Duration
		want    error
		unknown int
	}{
		{"zero ttl", TargetHashes("a", hs.Sequence[0]), 0, ErrBadTTL, 0},
		{"negative ttl", TargetHashes("a", hs.Sequence[0]), -time.Second, ErrBadTTL, 0},
		{"unknown hashes", TargetHashes("a", 1, 2, 3), time.Minute, ErrUnknownBlock, 3},
		{"unknown tenant", TargetHashes("zz", hs.Sequence[0]), time.Minute, ErrUnknownBlock, 1},
		{"no hashes", TargetHashes("a"), time.Minute, ErrUnknownBlock, 0},
		{"uncached tokens", TargetTokens("a", blockid.Salt{Namespace: "a"}, tokens(900, 2*testPage)), time.Minute, ErrUnknownBlock, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := h.ix.Pin(c.target, c.ttl)
			wantErr(t, err, c.want)
			if res.Unknown != c.unknown {
				t.Fatalf("unknown %d, want %d", res.Unknown, c.unknown)
			}
			if h.ix.Stats().PinnedPages != 0 {
				t.Fatal("a rejected pin pinned something")
			}
		})
	}
}

func TestPinUnknownHashesAffectNothingAndSaySo(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 2*testPage))
	res, err := h.ix.Pin(TargetHashes("a", hs.Sequence[0], 777, 888), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unknown != 2 || res.Pages != 1 {
		t.Fatalf("pin with unknown hashes: %+v", res)
	}
	ur, err := h.ix.Unpin(TargetHashes("a", 999))
	wantErr(t, err, ErrUnknownBlock)
	if ur.Unknown != 1 || h.info("a", hs.Sequence[0]).PinCount != 1 {
		t.Fatalf("unknown unpin: %+v", ur)
	}
}

func TestHashListResolution(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(1, 3*testPage))
	cases := []struct {
		name    string
		hashes  []uint64
		pinned  []int
		unknown int
	}{
		{"sequence hashes", []uint64{hs.Sequence[1]}, []int{1, 1, 0}, 0},
		{"sequence hashes with a miss", []uint64{hs.Sequence[2], 4242}, []int{1, 1, 1}, 1},
		{"local path from the root", []uint64{hs.Local[0], hs.Local[1]}, []int{1, 1, 0}, 0},
		{"local path that leaves the tree", []uint64{hs.Local[0], hs.Local[1], 5, 6}, []int{1, 1, 0}, 2},
		{"local path of the whole prompt", hs.Local, []int{1, 1, 1}, 0},
		{"signed hashes bit-cast", []uint64{blockid.FromSigned(int64(hs.Sequence[2]))}, []int{1, 1, 1}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.ix.Reset()
			h.commit("a", tokens(1, 3*testPage))
			res, err := h.ix.Pin(TargetHashes("a", c.hashes...), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if res.Unknown != c.unknown {
				t.Fatalf("unknown %d, want %d", res.Unknown, c.unknown)
			}
			if got := pinCounts(h, "a", hs.Sequence); !equalInts(got, c.pinned) {
				t.Fatalf("pin counts %v, want %v", got, c.pinned)
			}
		})
	}
}

func TestPinByTokens(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 3*testPage)
	hs := h.commit("a", toks)
	salt := blockid.Salt{Namespace: "a"}
	res, err := h.ix.Pin(TargetTokens("a", salt, cat(toks, tokens(99, 2*testPage+1))), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages != 3 || res.Unknown != 2 {
		t.Fatalf("pin by tokens: %+v (want 3 cached pages, 2 unknown full pages)", res)
	}
	ur, err := h.ix.Unpin(TargetTokens("a", salt, toks[:2*testPage]))
	if err != nil || ur.Pages != 2 {
		t.Fatalf("unpin prefix: %+v %v", ur, err)
	}
	if got := pinCounts(h, "a", hs.Sequence); !equalInts(got, []int{0, 0, 1}) {
		t.Fatalf("after unpinning the prefix path %v", got)
	}
}
