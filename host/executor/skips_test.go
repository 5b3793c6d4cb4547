package executor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
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

// A Pause the pause tier cannot take is refused whole, at once, with
// capacity_exhausted naming the tier; nothing of the turn applies.
func TestPauseRefusedWhenPauseTierIsFull(t *testing.T) {
	e := newEnv(t) // the disk tier holds 256 pages: 64 sessions of 4
	for i := 0; i < 64; i++ {
		s := e.commit("acme", toks(1000*i, 4*page))
		mustOK(t, e.apply("acme", directive.Pause{BlockHashes: hs(s.Sequence[3]), LeaseID: fmt.Sprint("L", i)}))
		e.settle()
	}
	s := e.commit("acme", toks(1000*64, 4*page))
	r := e.apply("acme", directive.Cache{BlockHashes: hs(s.Sequence[0]), Pin: true},
		directive.Pause{BlockHashes: hs(s.Sequence[3]), LeaseID: "L64"})
	mustRefuse(t, r, 1, errcode.CapacityExhausted)
	if !strings.Contains(r.Results[1].Error.Error(), "tier disk") {
		t.Fatalf("refusal does not name the tier: %v", r.Results[1].Error)
	}
	if _, ok := e.ix.Lease("L64"); ok {
		t.Fatal("the refused pause holds a lease")
	}
	if p := e.info("acme", s.Sequence[0]); p.PinCount != 0 {
		t.Fatal("the refused turn's pin applied")
	}
}

// settle runs the index's plans to completion, as the mover would.
func (e *env) settle() {
	e.t.Helper()
	for i := 0; i < 50; i++ {
		ts := e.ix.Plan(e.clock.Now(), nil)
		if len(ts) == 0 {
			return
		}
		for _, tr := range ts {
			var err error
			if tr.Kind == cache.Copy {
				e.loc++
				err = e.ix.CompleteCopy(tr, e.loc)
			} else {
				err = e.ix.CompleteDrop(tr)
			}
			if err != nil {
				e.t.Fatalf("complete %v: %v", tr, err)
			}
		}
	}
	e.t.Fatal("still planning after 50 rounds")
}
