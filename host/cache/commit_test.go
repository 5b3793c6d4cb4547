package cache

import (
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

func TestCommitInsertsAndReportsDuplicates(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 3*testPage)
	hs := blockid.Compute(toks, testPage, blockid.Salt{Namespace: "a"})
	var res CommitResult
	if err := h.ix.Commit("a", hs, []uint64{11, 12, 13}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stored != 3 || res.Present != 0 || len(res.Unused) != 0 {
		t.Fatalf("first commit: %+v", res)
	}
	evs := h.ix.DrainEvents(nil)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 stored", len(evs))
	}
	for i, ev := range evs {
		if ev.Kind != Stored || ev.Tier != tier.Device || ev.Tenant != "a" || ev.Seq != hs.Sequence[i] || ev.Local != hs.Local[i] {
			t.Fatalf("event %d: %+v", i, ev)
		}
		if wantParent := i > 0; ev.HasParent != wantParent || (wantParent && ev.Parent != hs.Sequence[i-1]) {
			t.Fatalf("event %d parent: %+v", i, ev)
		}
	}
	// A longer prompt over the same prefix: the prefix is present, its
	// offered slots come back unused; the tail is stored.
	toks2 := cat(toks, tokens(50, testPage))
	hs2 := blockid.Compute(toks2, testPage, blockid.Salt{Namespace: "a"})
	if err := h.ix.Commit("a", hs2, []uint64{21, 22, 23, 24}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stored != 1 || res.Present != 3 || !slices.Equal(res.Unused, []uint64{21, 22, 23}) {
		t.Fatalf("second commit: %+v", res)
	}
	if pi := h.info("a", hs.Sequence[0]); pi.Loc[tier.Device] != 11 {
		t.Fatalf("existing page moved to the duplicate slot: %+v", pi)
	}
	if pi := h.info("a", hs2.Sequence[3]); pi.Loc[tier.Device] != 24 || pi.Depth != 4 {
		t.Fatalf("new page: %+v", pi)
	}
	h.check()
}

func TestCommitRejectsBadInput(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 3*testPage)
	salt := blockid.Salt{Namespace: "a"}
	hs := blockid.Compute(toks, testPage, salt)
	other := h.commit("a", tokens(900, testPage)) // a page elsewhere in the tree

	var res CommitResult
	err := h.ix.Commit("a", hs, []uint64{1, 2}, &res)
	wantErr(t, err, ErrBadArgument)
	if len(res.Unused) != 2 {
		t.Fatalf("unused %v, want both offered slots back", res.Unused)
	}

	bad := blockid.Hashes{Local: slices.Clone(hs.Local), Sequence: slices.Clone(hs.Sequence)}
	bad.Sequence[1] ^= 1
	err = h.ix.Commit("a", bad, []uint64{1, 2, 3}, &res)
	wantErr(t, err, ErrBadArgument)
	if res.Stored != 1 || !slices.Equal(res.Unused, []uint64{2, 3}) {
		t.Fatalf("after a broken chain at page 1: %+v", res)
	}

	col := blockid.Hashes{Local: slices.Clone(hs.Local), Sequence: slices.Clone(hs.Sequence)}
	col.Sequence[1] = other.Sequence[0] // names an existing page under another parent
	err = h.ix.Commit("a", col, []uint64{4, 5, 6}, &res)
	wantErr(t, err, ErrHashCollision)
	if res.Present != 1 || !slices.Equal(res.Unused, []uint64{4, 5, 6}) {
		t.Fatalf("after a collision at page 1: %+v", res)
	}
	h.check()
}

func TestInsertOnColderTiers(t *testing.T) {
	h := newHarness(t)
	hs := blockid.Compute(tokens(1, 2*testPage), testPage, blockid.Salt{})
	seq, stored, err := h.ix.Insert("a", 0, false, hs.Local[0], tier.Disk, 7)
	if err != nil || !stored || seq != hs.Sequence[0] {
		t.Fatalf("insert root page: seq %d stored %v err %v", seq, stored, err)
	}
	_, _, err = h.ix.Insert("a", seq, true, hs.Local[1], tier.Host, 8)
	wantErr(t, err, ErrNotResident) // parent is not on host
	_, _, err = h.ix.Insert("a", 12345, true, hs.Local[1], tier.Disk, 8)
	wantErr(t, err, ErrUnknownBlock)
	_, _, err = h.ix.Insert("a", seq, true, hs.Local[1], tier.Tier(9), 8)
	wantErr(t, err, ErrBadArgument)
	seq2, stored, err := h.ix.Insert("a", seq, true, hs.Local[1], tier.Disk, 8)
	if err != nil || !stored || seq2 != hs.Sequence[1] {
		t.Fatalf("insert child: seq %d stored %v err %v", seq2, stored, err)
	}
	if _, stored, _ = h.ix.Insert("a", seq, true, hs.Local[1], tier.Disk, 9); stored {
		t.Fatal("second insert on the same tier reported stored")
	}
	if pi := h.info("a", seq2); pi.Loc[tier.Disk] != 8 || pi.Tiers != TierSet(0).with(tier.Disk) {
		t.Fatalf("child: %+v", pi)
	}
	// A disk-only prefix matches; the engine loads it back.
	var m MatchResult
	h.ix.Match("a", blockid.Salt{}, tokens(1, 2*testPage), &m)
	if len(m.Pages) != 2 || m.Pages[1].Tiers.Has(tier.Device) {
		t.Fatalf("match of a disk-only prefix: %+v", m.Pages)
	}
	h.check()
}

func TestEventsSink(t *testing.T) {
	var got []Event
	h := newHarness(t, func(c *Config) { c.OnEvent = func(e Event) { got = append(got, e) } })
	h.commit("a", tokens(1, 2*testPage))
	if len(got) != 2 || h.ix.PendingEvents() != 0 {
		t.Fatalf("sink got %d events, buffer holds %d", len(got), h.ix.PendingEvents())
	}
	h.ix.Reset()
	if last := got[len(got)-1]; last.Kind != Cleared {
		t.Fatalf("reset emitted %+v, want cleared", last)
	}
}

func TestResetClearsEverything(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DeviceWrite = WriteThrough })
	hs := h.commit("a", tokens(1, 3*testPage))
	if _, err := h.ix.Pin(TargetHashes("a", hs.Sequence[2]), 60e9); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.ix.Pause(TargetHashes("a", hs.Sequence[0]), "l1", tier.Disk, 60e9); err != nil {
		t.Fatal(err)
	}
	plan := h.plan()
	if len(plan) == 0 {
		t.Fatal("expected write-through transitions before the reset")
	}
	h.ix.DrainEvents(nil)
	if n := h.ix.Reset(); n != 3 {
		t.Fatalf("reset forgot %d pages, want 3", n)
	}
	evs := h.ix.DrainEvents(nil)
	var cleared []tier.Tier
	for _, e := range evs {
		if e.Kind != Cleared {
			t.Fatalf("reset emitted %+v", e)
		}
		cleared = append(cleared, e.Tier)
	}
	if !slices.Equal(cleared, []tier.Tier{tier.Device, tier.Host, tier.Disk}) {
		t.Fatalf("cleared %v, want every present tier", cleared)
	}
	st := h.ix.Stats()
	if st.Pages != 0 || st.PinnedPages != 0 || st.Leases != 0 || st.InFlight != 0 {
		t.Fatalf("after reset: %+v", st)
	}
	wantErr(t, h.ix.CompleteCopy(plan[0], 99), ErrUnknownTransition)
	if len(h.match("a", tokens(1, 3*testPage))) != 0 {
		t.Fatal("reset index still matches")
	}
	h.check()
}

func TestNewRejectsBadConfig(t *testing.T) {
	clock := NewManualClock(0)
	cases := map[string]func(*Config){
		"page size":      func(c *Config) { c.PageSize = 0 },
		"clock":          func(c *Config) { c.Clock = nil },
		"capacity":       func(c *Config) { c.Tiers[tier.Host].Capacity = -1 },
		"high":           func(c *Config) { c.Tiers[tier.Host].High = 1.5 },
		"low above high": func(c *Config) { c.Tiers[tier.Host].Low = 0.95 },
		"pin fraction":   func(c *Config) { c.Tiers[tier.Disk].PinFraction = -0.1 },
		"write policy":   func(c *Config) { c.DeviceWrite = 7 },
		"quota":          func(c *Config) { c.TenantPinQuota = -1 },
		"tenant quota":   func(c *Config) { c.TenantQuotas = map[string]int{"x": -2} },
		"NaN low":        func(c *Config) { c.Tiers[tier.Device].Low = nan() },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(clock)
			mod(&cfg)
			_, err := New(cfg)
			wantErr(t, err, ErrBadConfig)
		})
	}
	if _, err := New(testConfig(clock)); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for _, s := range []string{"write-through", "write-back", "none"} {
		p, err := ParseWritePolicy(s)
		if err != nil || p.String() != s {
			t.Fatalf("ParseWritePolicy(%q) = %v, %v", s, p, err)
		}
	}
	_, err := ParseWritePolicy("sometimes")
	wantErr(t, err, ErrBadConfig)
}

func nan() float64 { var z float64; return z / z }

// CommitFrom names the pages before first by hash alone: they must be on
// the device already, and the new pages hang from them.
func TestCommitFromExtendsAPathOnTheDevice(t *testing.T) {
	h := newHarness(t)
	toks := tokens(1, 4*testPage)
	hs := blockid.Compute(toks, testPage, blockid.Salt{Namespace: "a"})
	var res CommitResult
	first := blockid.Hashes{Local: hs.Local[:2], Sequence: hs.Sequence[:2]}
	if err := h.ix.Commit("a", first, []uint64{11, 12}, &res); err != nil {
		t.Fatal(err)
	}
	if err := h.ix.CommitFrom("a", hs, 2, []uint64{13, 14}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Stored != 2 || res.Present != 0 || len(res.Unused) != 0 {
		t.Fatalf("commit from page 2: %+v", res)
	}
	for i, want := range []uint64{11, 12, 13, 14} {
		if pi := h.info("a", hs.Sequence[i]); pi.Loc[tier.Device] != want || pi.Depth != i+1 {
			t.Fatalf("page %d: %+v, want slot %d", i, pi, want)
		}
	}

	// Sizes that do not agree, and a first page past the hashes.
	wantErr(t, h.ix.CommitFrom("a", hs, 1, []uint64{1}, &res), ErrBadArgument)
	if !slices.Equal(res.Unused, []uint64{1}) {
		t.Fatalf("unused %v, want the offered slot back", res.Unused)
	}
	wantErr(t, h.ix.CommitFrom("a", hs, 5, nil, &res), ErrBadArgument)

	// A page before first that the index does not hold: nothing changes.
	other := blockid.Compute(cat(tokens(700, testPage), toks[testPage:]), testPage, blockid.Salt{Namespace: "a"})
	wantErr(t, h.ix.CommitFrom("a", other, 2, []uint64{21, 22}, &res), ErrNotResident)
	if res.Stored != 0 || !slices.Equal(res.Unused, []uint64{21, 22}) {
		t.Fatalf("after a missing earlier page: %+v", res)
	}
	h.check()
}
