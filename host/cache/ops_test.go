package cache

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
)

func TestLockUnlock(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, 3*testPage))
	n, err := h.ix.Lock("a", hs.Sequence[1])
	if err != nil || n != 2 {
		t.Fatalf("lock: %d %v", n, err)
	}
	if _, err := h.ix.Lock("a", hs.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	locks := func() []int {
		var out []int
		for _, s := range hs.Sequence {
			out = append(out, h.info("a", s).LockRef)
		}
		return out
	}
	if got := locks(); !equalInts(got, []int{2, 2, 1}) {
		t.Fatalf("lock refs %v", got)
	}
	if _, err := h.ix.Unlock("a", hs.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	_, err = h.ix.Unlock("a", hs.Sequence[2])
	wantErr(t, err, ErrNotLocked)
	if got := locks(); !equalInts(got, []int{1, 1, 0}) {
		t.Fatalf("a refused unlock changed lock refs: %v", got)
	}
	_, err = h.ix.Lock("a", 4242)
	wantErr(t, err, ErrUnknownBlock)
	_, err = h.ix.Unlock("b", hs.Sequence[0])
	wantErr(t, err, ErrUnknownBlock)
}

func TestRetain(t *testing.T) {
	h := newHarness(t)
	hs := h.commit("a", tokens(0, 2*testPage))
	cases := []struct {
		name string
		prio int
		d    time.Duration
		want error
	}{
		{"too high", 101, time.Minute, ErrBadPriority},
		{"negative", -1, time.Minute, ErrBadPriority},
		{"no duration", 5, 0, ErrBadTTL},
	}
	for _, c := range cases {
		_, err := h.ix.Retain(TargetHashes("a", hs.Sequence[1]), c.prio, c.d)
		if err == nil || !errorsIs(err, c.want) {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	res, err := h.ix.Retain(TargetHashes("a", hs.Sequence[1], 99), 40, time.Minute)
	if err != nil || res.Pages != 2 || res.Unknown != 1 {
		t.Fatalf("retain: %+v %v", res, err)
	}
	if pi := h.info("a", hs.Sequence[0]); pi.Priority != 40 || pi.RetainExpiry != h.clock.Now()+time.Minute {
		t.Fatalf("ancestor retention: %+v", pi)
	}
	if _, err := h.ix.Retain(TargetHashes("a", hs.Sequence[1]), 0, 0); err != nil {
		t.Fatalf("clearing retention: %v", err)
	}
	if pi := h.info("a", hs.Sequence[1]); pi.Priority != 0 {
		t.Fatalf("retention not cleared: %+v", pi)
	}
}

func TestTransientPurge(t *testing.T) {
	h := newHarness(t)
	prefix := tokens(0, testPage)
	think := tokens(5000, 2*testPage)
	hs := h.commit("a", cat(prefix, think)) // page 0 ordinary, pages 1-2 a think tail
	other := h.commit("a", cat(prefix, tokens(9000, testPage)))
	res, err := h.ix.MarkTransient(TargetHashes("a", hs.Sequence[1], hs.Sequence[2], 777), true)
	if err != nil || res.Pages != 2 || res.Unknown != 1 {
		t.Fatalf("mark: %+v %v", res, err)
	}
	if h.info("a", hs.Sequence[0]).Transient {
		t.Fatal("marking a page transient marked its ancestor")
	}
	// Lock the tail: the purge skips it and counts it; the page above it is
	// then interior.
	if _, err := h.ix.Lock("a", hs.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	pr, err := h.ix.PurgeTransientLeaves(TargetHashes("a", hs.Sequence[1], hs.Sequence[2], other.Sequence[1]))
	if err != nil {
		t.Fatal(err)
	}
	if pr.Removed != 0 || pr.Locked != 1 || pr.Interior != 1 || pr.NotTransient != 1 {
		t.Fatalf("purge of a locked tail: %+v", pr)
	}
	if _, err := h.ix.Unlock("a", hs.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	h.ix.DrainEvents(nil)
	pr, err = h.ix.PurgeTransientLeaves(TargetHashes("a", hs.Sequence[1], hs.Sequence[2]))
	if err != nil || pr.Removed != 2 || len(pr.Freed) != 2 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	if pr.Freed[0].Seq != hs.Sequence[2] || pr.Freed[0].Tier != tier.Device {
		t.Fatalf("freed %+v, want the deepest page first", pr.Freed)
	}
	if evs := h.ix.DrainEvents(nil); len(evs) != 2 || evs[0].Kind != Removed {
		t.Fatalf("purge events %+v", evs)
	}
	if !h.ix.Contains("a", hs.Sequence[0]) || !h.ix.Contains("a", other.Sequence[1]) {
		t.Fatal("purge removed ordinary pages")
	}
	// Unmarking works and reports the change.
	if r, _ := h.ix.MarkTransient(TargetHashes("a", other.Sequence[1]), false); r.Pages != 0 {
		t.Fatalf("clearing an unset flag reported %d changes", r.Pages)
	}
	h.check()
}

func TestPruneDescendants(t *testing.T) {
	h := newHarness(t)
	root := tokens(0, testPage)
	a := h.commit("a", cat(root, tokens(100, 3*testPage)))
	b := h.commit("a", cat(root, tokens(200, 2*testPage)))
	// Lock a's second page: it and its ancestors are kept.
	if _, err := h.ix.Lock("a", a.Sequence[2]); err != nil {
		t.Fatal(err)
	}
	// A pin below does not stop a prune.
	if _, err := h.ix.Pin(TargetHashes("a", b.Sequence[2]), time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := h.ix.PruneDescendants(TargetHashes("a", a.Sequence[0]))
	if err != nil {
		t.Fatal(err)
	}
	// Removed: a[3], b[1], b[2]. Locked: a[1], a[2].
	if res.Removed != 3 || res.Locked != 2 || len(res.Freed) != 3 {
		t.Fatalf("prune: %+v", res)
	}
	for _, s := range []uint64{a.Sequence[0], a.Sequence[1], a.Sequence[2]} {
		if !h.ix.Contains("a", s) {
			t.Fatalf("prune removed kept page %d", s)
		}
	}
	for _, s := range []uint64{a.Sequence[3], b.Sequence[1], b.Sequence[2]} {
		if h.ix.Contains("a", s) {
			t.Fatalf("prune kept page %d", s)
		}
	}
	if h.ix.Stats().PinnedPages != 1 {
		t.Fatalf("pinned pages %d, want only the shared root left pinned", h.ix.Stats().PinnedPages)
	}
	res, err = h.ix.PruneDescendants(TargetHashes("a", 1234))
	wantErr(t, err, ErrUnknownBlock)
	if res.Unknown != 1 {
		t.Fatalf("unknown %d", res.Unknown)
	}
	h.check()
}

func TestPlanFetch(t *testing.T) {
	h := newHarness(t)
	hs := blockHashes(3)
	parent, has := uint64(0), false
	for i, l := range hs.Local {
		if _, _, err := h.ix.Insert("a", parent, has, l, tier.Disk, uint64(10+i)); err != nil {
			t.Fatal(err)
		}
		parent, has = hs.Sequence[i], true
	}
	ts, res, err := h.ix.PlanFetch(TargetHashes("a", hs.Sequence[2], 55), tier.Device, nil)
	if err != nil || res.Planned != 3 || res.Unknown != 1 {
		t.Fatalf("fetch: %+v %v", res, err)
	}
	if ts[0].From != tier.Disk || ts[0].To != tier.Device || ts[0].FromLoc != 10 || ts[1].After != ts[0].ID {
		t.Fatalf("fetch plan %v", ts)
	}
	// Already in flight: nothing more.
	if _, res, _ := h.ix.PlanFetch(TargetHashes("a", hs.Sequence[2]), tier.Device, nil); res.Already != 3 {
		t.Fatalf("second fetch %+v", res)
	}
	if errs := h.complete(ts); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got := h.ix.Stats().Tiers[tier.Device].Pages; got != 3 {
		t.Fatalf("%d device pages after load-back", got)
	}
	_, _, err = h.ix.PlanFetch(TargetHashes("a", hs.Sequence[0]), tier.Remote, nil)
	wantErr(t, err, ErrBadArgument)
}

func TestTierSetAndNames(t *testing.T) {
	s := TierSet(0).with(tier.Host).with(tier.Remote)
	if s.Count() != 2 || !s.Has(tier.Remote) || s.Has(tier.Device) {
		t.Fatalf("set %b", s)
	}
	if hot, ok := s.Hottest(); !ok || hot != tier.Host {
		t.Fatalf("hottest %v", hot)
	}
	if _, ok := TierSet(0).Hottest(); ok {
		t.Fatal("empty set has a hottest tier")
	}
	if Copy.String() != "copy" || Drop.String() != "drop" || Stored.String() != "stored" || ReasonPause.String() != "pause" {
		t.Fatal("names")
	}
}
