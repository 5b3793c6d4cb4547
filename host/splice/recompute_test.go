package splice

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
)

// positionsOf lists an order's token positions.
func positionsOf(o FillOrder) []int {
	out := make([]int, len(o.Positions))
	for i, p := range o.Positions {
		out[i] = int(p)
	}
	return out
}

// TestRecomputeFirst: with recompute first k, one sparse order carries the
// replacements and the first k kept tokens after each edit, its pages run
// from the first one it writes, and the session is cached whole after it.
func TestRecomputeFirst(t *testing.T) {
	for _, arr := range []layout.Arrangement{layout.LayerMajor, layout.PageMajor} {
		t.Run(arr.String(), func(t *testing.T) {
			r := newRig(t, rigOpts{arr: arr, recompute: true})
			base := seqTokens(10, 40)
			r.prefill("a", base)
			first := &Recompute{First: 3}
			edits := []Edit{
				{Start: 6, End: 9, Replacement: []uint32{7, 8}, Recompute: first}, // Δ -1
				{Start: 25, End: 27, Recompute: first},                            // Δ -2, at new 24
			}
			res, err := r.sp.Splice(ctx, "a", edits)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.fills) != 1 || res.Fills != 1 {
				t.Fatalf("%d orders sent (result %d), want one sparse order", len(r.fills), res.Fills)
			}
			o := r.fills[0]
			// Replacement at 6, 7; first 3 after it: 8, 9, 10; first 3 after
			// the second edit (new position 24): 24, 25, 26.
			if want := []int{6, 7, 8, 9, 10, 24, 25, 26}; !slices.Equal(positionsOf(o), want) || o.Position != 6 {
				t.Fatalf("order positions %v at %d, want %v", positionsOf(o), o.Position, want)
			}
			want := apply(base, edits)
			for k, p := range o.Positions {
				if o.Tokens[k] != want[p] {
					t.Fatalf("token at %d is %d, want %d", p, o.Tokens[k], want[p])
				}
			}
			if o.Candidates != nil {
				t.Fatalf("candidates %+v without share or a budget", o.Candidates)
			}
			if pages := len(o.PrefixPageSlots) + len(o.PageSlots); len(o.PrefixPageSlots) != 1 || pages != 7 {
				t.Fatalf("prefix %d pages, %d in all: want 1 before position 6 and through position 26", len(o.PrefixPageSlots), pages)
			}
			rc := res.Recompute
			if rc.Named != 6 || rc.Recomputed != 6 || !rc.Done || rc.Region != len(want)/rigPage*rigPage-6-2 {
				t.Fatalf("recompute result %+v", rc)
			}
			if n := r.checkSession("a"); n != len(want)/rigPage {
				t.Fatalf("%d pages cached, want %d", n, len(want)/rigPage)
			}
			r.checkNoLeak()
		})
	}
}

// TestRecomputeRanked: a share or a budget hands the other kept tokens to
// the engine as candidates; what it recomputed comes back in the result.
func TestRecomputeRanked(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   Recompute
		want func(region int) int
	}{
		{"share", Recompute{Share: 0.5}, func(region int) int { return region / 2 }},
		{"guard", Recompute{MaxKL: 0.005}, func(region int) int { return region }},
		{"first and share", Recompute{First: 2, Share: 0.25}, func(region int) int { return 2 + int(math.Round(float64(region)/4)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The rule comes from the configuration this time.
			r := newRig(t, rigOpts{arr: layout.LayerMajor, recompute: true, rule: tc.rc})
			base := seqTokens(10, 40)
			r.prefill("a", base)
			edits := []Edit{{Start: 10, End: 14}} // a deletion: nothing to fill
			res, err := r.sp.Splice(ctx, "a", edits)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.fills) != 1 {
				t.Fatalf("%d orders, want 1", len(r.fills))
			}
			o, rc := r.fills[0], res.Recompute
			c := o.Candidates
			if c == nil || c.Share != tc.rc.Share || c.MaxKL != tc.rc.MaxKL {
				t.Fatalf("candidates %+v", c)
			}
			// Kept tokens after the edit in the 9 cached pages: 36 - 10.
			if rc.Region != 26 || c.Region != 26 || len(c.Positions)+rc.Named != 26 || int(c.Positions[0]) != 10+rc.Named {
				t.Fatalf("region %d, candidates %d from %d, named %d", rc.Region, len(c.Positions), c.Positions[0], rc.Named)
			}
			if got := rc.Recomputed; got != tc.want(rc.Region) {
				t.Fatalf("recomputed %d, want %d", got, tc.want(rc.Region))
			}
			r.checkSession("a")
			r.checkNoLeak()
		})
	}
}

// TestRecomputeRefused: an engine that did not register recompute is
// never sent a sparse order: a directive's recompute, or a configured
// one on an engine that fills, is refused; on an engine that serves no
// fills (a connector) the configured First is the front door's to do.
func TestRecomputeRefused(t *testing.T) {
	edits := []Edit{{Start: 10, End: 11, Replacement: []uint32{1, 2, 3}, Recompute: &Recompute{First: 8}}}
	r := newRig(t, rigOpts{arr: layout.LayerMajor})
	r.prefill("a", seqTokens(10, 40))
	if _, err := r.sp.Splice(ctx, "a", edits); !errors.Is(err, ErrRecompute) {
		t.Fatalf("explicit recompute on an engine without it: %v", err)
	}
	r = newRig(t, rigOpts{arr: layout.LayerMajor, rule: Recompute{Share: 0.2}})
	r.prefill("a", seqTokens(10, 40))
	if _, err := r.sp.Splice(ctx, "a", []Edit{{Start: 10, End: 11}}); !errors.Is(err, ErrRecompute) {
		t.Fatalf("configured recompute on an engine without it: %v", err)
	}
	r.checkNoLeak()
	r = newRig(t, rigOpts{arr: layout.LayerMajor, noFill: true, rule: Recompute{First: 8}})
	r.prefill("a", seqTokens(10, 40))
	if _, err := r.sp.Splice(ctx, "a", []Edit{{Start: 10, End: 14}}); err != nil {
		t.Fatalf("configured First on a connector engine: %v", err)
	}
	if _, err := r.sp.Splice(ctx, "a", edits); !errors.Is(err, ErrRecompute) {
		t.Fatalf("explicit recompute on a connector engine: %v", err)
	}
	r.checkNoLeak()
}

// TestRecomputeFailure: when the sparse order fails, the branch ends at
// the first page it writes and nothing leaks.
func TestRecomputeFailure(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.PageMajor, recompute: true, rule: Recompute{First: 4}})
	r.prefill("a", seqTokens(10, 40))
	r.failFill = true
	if _, err := r.sp.Splice(ctx, "a", []Edit{{Start: 9, End: 13}}); !errors.Is(err, ErrFill) {
		t.Fatalf("got %v, want ErrFill", err)
	}
	if n := r.checkSession("a"); n != 2 {
		t.Fatalf("%d pages cached, want the 2 before the first recomputed token", n)
	}
	r.checkNoLeak()
}
