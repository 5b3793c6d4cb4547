package executor

import (
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

// A revoke that leaves pages says why for each one: the operator's report
// was "0 blocks, 27 skipped" with no way to tell a running request from a
// prefix other sessions share.
func TestRevokeSaysWhyItSkipped(t *testing.T) {
	e := newEnv(t)
	// Session a: 4 pages; session b shares a's first 2 pages.
	a := e.commit("acme", toks(0, 4*page))
	b := e.commit("acme", append(toks(0, 2*page), toks(900, 2*page)...))
	// A running request of b holds the shared prefix.
	if _, err := e.ix.Lock("acme", b.Sequence[3]); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.apply("acme", directive.Pause{BlockHashes: hs(a.Sequence[3]), LeaseID: "L"}))
	r := e.apply("acme", directive.RevokeLease{LeaseID: "L"})
	checkSkips(t, r, 2, map[directive.SkipReason]int{directive.SkipLocked: 2})

	// Once b's request ended, the prefix stays because b's pages hang under it.
	if _, err := e.ix.Unlock("acme", b.Sequence[3]); err != nil {
		t.Fatal(err)
	}
	a = e.commit("acme", toks(0, 4*page))
	mustOK(t, e.apply("acme", directive.Pause{BlockHashes: hs(a.Sequence[3]), LeaseID: "M"}))
	r = e.apply("acme", directive.RevokeLease{LeaseID: "M"})
	checkSkips(t, r, 2, map[directive.SkipReason]int{directive.SkipShared: 2})
}

func checkSkips(t *testing.T, r directive.TurnReply, blocks int, want map[directive.SkipReason]int) {
	t.Helper()
	mustOK(t, r)
	eff := r.Results[0].Effect
	got := map[directive.SkipReason]int{}
	sum := 0
	for _, sk := range eff.Skips {
		got[sk.Reason] = sk.Blocks
		sum += sk.Blocks
	}
	if eff.Blocks != blocks || eff.Skipped != sum || len(got) != len(want) {
		t.Fatalf("effect %+v: want %d blocks and skips %v adding up to skipped", eff, blocks, want)
	}
	for reason, n := range want {
		if got[reason] != n {
			t.Errorf("skipped for %q: got %d, want %d (effect %+v)", reason, got[reason], n, eff)
		}
	}
}
