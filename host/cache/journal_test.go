package cache

import (
	"errors"
	"testing"
	"time"
)

// pinState captures what a rollback must restore exactly.
type pinState struct {
	count     uint32
	ttl, exp  time.Duration
	transient bool
}

func snapshotPins(ix *Index, tenant string, seqs []uint64) []pinState {
	out := make([]pinState, len(seqs))
	for i, s := range seqs {
		n := ix.tenants[tenant].bySeq[s]
		out[i] = pinState{n.pinCount, n.r().pinTTL, n.r().pinExpiry, n.transient}
	}
	return out
}

func TestJournalRollbackRestoresExactly(t *testing.T) {
	h := newHarness(t)
	ix, clk := h.ix, h.clock
	seqs := h.commit("a", tokens(0, 6*testPage)).Sequence
	// Prior state: a pin with a particular TTL and expiry, a transient page.
	if _, err := ix.Pin(TargetHashes("a", seqs[2]), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.MarkTransient(TargetHashes("a", seqs[5]), true); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	before := snapshotPins(ix, "a", seqs)
	stats := ix.Stats()

	ix.BeginJournal()
	// Unpin, pin again with a longer TTL, pin the leaf, flip transient marks.
	if _, err := ix.Unpin(TargetHashes("a", seqs[2])); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Pin(TargetHashes("a", seqs[2]), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Pin(TargetHashes("a", seqs[4]), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.MarkTransient(TargetHashes("a", seqs[5]), false); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.MarkTransient(TargetHashes("a", seqs[3]), true); err != nil {
		t.Fatal(err)
	}
	ix.RollbackJournal()

	after := snapshotPins(ix, "a", seqs)
	for i := range seqs {
		if before[i] != after[i] {
			t.Errorf("page %d: before %+v, after rollback %+v", i, before[i], after[i])
		}
	}
	if got := ix.Stats(); got.PinnedPages != stats.PinnedPages || got.Tiers != stats.Tiers {
		t.Errorf("stats changed: before %+v after %+v", stats, got)
	}
	if err := ix.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestJournalCommitKeepsChanges(t *testing.T) {
	h := newHarness(t)
	ix := h.ix
	seqs := h.commit("a", tokens(0, 3*testPage)).Sequence
	ix.BeginJournal()
	if _, err := ix.Pin(TargetHashes("a", seqs[2]), time.Minute); err != nil {
		t.Fatal(err)
	}
	ix.CommitJournal()
	ix.BeginJournal()
	ix.RollbackJournal() // an empty journal undoes nothing older
	if p, _ := ix.Lookup("a", seqs[0]); p.PinCount != 1 {
		t.Fatalf("committed pin lost: %+v", p)
	}
}

func TestJournalRollbackAfterRefusedPin(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TenantQuotas = map[string]int{"a": 2} })
	ix := h.ix
	seqs := h.commit("a", tokens(0, 4*testPage)).Sequence
	ix.BeginJournal()
	if _, err := ix.Pin(TargetHashes("a", seqs[1]), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Pin(TargetHashes("a", seqs[3]), time.Minute); !errors.Is(err, ErrTenantQuota) {
		t.Fatalf("want quota refusal, got %v", err)
	}
	ix.RollbackJournal()
	if st := ix.Stats(); st.PinnedPages != 0 {
		t.Fatalf("%d pages still pinned after rollback", st.PinnedPages)
	}
}
