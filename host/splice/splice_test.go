package splice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

var ctx = context.Background()

// TestAmortizeContract splices with every shape of edit on both
// arrangements and both layouts, then checks every cached key of the
// edited sequence equals RoPE(new_pos)·h(token) and every other element is
// bit-identical to a prefill.
func TestAmortizeContract(t *testing.T) {
	base := seqTokens(1000, 40) // 10 pages
	cases := []struct {
		name      string
		edits     []Edit
		inPlace   bool // some page must re-link in place
		wantFills int
	}{
		{"negative delta, unaligned", []Edit{{Start: 6, End: 9}}, false, 0},
		{"positive delta, unaligned, filled", []Edit{{Start: 6, End: 7, Replacement: []uint32{7, 8, 9}}}, false, 1},
		{"aligned delete of whole pages", []Edit{{Start: 8, End: 16}}, true, 0},
		{"aligned insert of a page", []Edit{{Start: 8, End: 8, Replacement: seqTokens(5000, 4)}}, true, 1},
		{"same length replacement", []Edit{{Start: 9, End: 11, Replacement: []uint32{1, 2}}}, true, 1},
		{"multi-edit turn", []Edit{
			{Start: 25, End: 26, Replacement: []uint32{200}},
			{Start: 5, End: 7, Replacement: []uint32{100, 101, 102}},
			{Start: 13, End: 20},
		}, false, 2},
		{"edit in the last page", []Edit{{Start: 37, End: 38}}, false, 0},
	}
	for _, arr := range []layout.Arrangement{layout.LayerMajor, layout.PageMajor} {
		for _, mla := range []bool{false, true} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%v/mla=%v/%s", arr, mla, tc.name), func(t *testing.T) {
					r := newRig(t, rigOpts{arr: arr, mla: mla})
					r.prefill("a", base)
					res, err := r.sp.Splice(ctx, "a", tc.edits)
					if err != nil {
						t.Fatalf("splice: %v", err)
					}
					want := apply(base, tc.edits)
					s, _ := r.sess.Session("a")
					if !slices.Equal(s.Tokens, want) {
						t.Fatalf("session tokens %v, want %v", s.Tokens, want)
					}
					if res.Fills != tc.wantFills || len(r.fills) != tc.wantFills {
						t.Fatalf("fills: result %d, engine got %d, want %d", res.Fills, len(r.fills), tc.wantFills)
					}
					if tc.inPlace != (res.InPlace > 0) {
						t.Fatalf("in-place pages %d, want some: %v (%+v)", res.InPlace, tc.inPlace, res)
					}
					pages := r.checkSession("a")
					if wantPages := len(want) / rigPage; pages != wantPages || s.Cached != wantPages*rigPage {
						t.Fatalf("cached pages %d (session says %d tokens), want %d full pages", pages, s.Cached, wantPages)
					}
					if res.Released == 0 {
						t.Fatalf("no old page released: %+v", res)
					}
					r.checkNoLeak()
				})
			}
		}
	}
}

// TestChainedSplices applies several splices in turn, so keys are rotated
// more than once, with Δ of both signs.
func TestChainedSplices(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.LayerMajor})
	r.prefill("a", seqTokens(10, 64))
	for i, edits := range [][]Edit{
		{{Start: 10, End: 13}},
		{{Start: 4, End: 4, Replacement: seqTokens(900, 9)}},
		{{Start: 30, End: 41}, {Start: 50, End: 51, Replacement: seqTokens(700, 5)}},
		{{Start: 12, End: 16}},
	} {
		if _, err := r.sp.Splice(ctx, "a", edits); err != nil {
			t.Fatalf("splice %d: %v", i, err)
		}
		r.checkSession("a")
		r.checkNoLeak()
	}
}

// TestCopyOnWrite: pages another session's path runs through, or that a
// running request holds, are copied and left exactly as they were.
func TestCopyOnWrite(t *testing.T) {
	for _, how := range []string{"session", "lock"} {
		t.Run(how, func(t *testing.T) {
			r := newRig(t, rigOpts{arr: layout.PageMajor})
			a := seqTokens(10, 40)
			r.prefill("a", a)
			b := a[:28] // b's path is the first 7 pages of a's
			if how == "session" {
				r.prefill("b", b)
			} else {
				h := blockid.Compute(b, rigPage, blockid.Salt{Namespace: rigTenant})
				if _, err := r.ix.Lock(rigTenant, h.Sequence[len(h.Sequence)-1]); err != nil {
					t.Fatal(err)
				}
			}
			before := r.snapshotPages(b)
			res, err := r.sp.Splice(ctx, "a", []Edit{{Start: 8, End: 16}}) // aligned: would re-link in place
			if err != nil {
				t.Fatal(err)
			}
			if res.Shared != 5 || res.Released != 3 {
				t.Fatalf("shared %d released %d, want 5 shared (pages 2..6) and 3 released: %+v", res.Shared, res.Released, res)
			}
			if after := r.snapshotPages(b); !slices.Equal(before, after) {
				t.Fatal("the shared pages changed")
			}
			r.checkSession("a")
			if how == "session" {
				r.checkSession("b")
			}
			if err := r.ix.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// snapshotPages copies the bytes of the cached pages of tokens.
func (r *rig) snapshotPages(tokens []uint32) []byte {
	var out []byte
	buf := make([]byte, r.lay.PageBytes())
	for _, s := range r.path(tokens) {
		if err := r.arena.ReadPage(pool.Slot(s), buf); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, buf...)
	}
	return out
}

// TestForget truncates the branch at the edit and releases what follows.
func TestForget(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.LayerMajor})
	base := seqTokens(10, 40)
	r.prefill("a", base)
	res, err := r.sp.Splice(ctx, "a", []Edit{{Start: 14, End: 18, Replacement: []uint32{1, 2}, Mode: Forget}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.fills) != 0 || res.NewPages != 0 || res.Released != 7 {
		t.Fatalf("forget: %+v, %d fills; want nothing new and pages 3..9 released", res, len(r.fills))
	}
	s, _ := r.sess.Session("a")
	if s.Cached != 12 || !slices.Equal(s.Tokens, apply(base, []Edit{{Start: 14, End: 18, Replacement: []uint32{1, 2}}})) {
		t.Fatalf("session after forget: cached %d tokens %v", s.Cached, s.Tokens)
	}
	if n := r.checkSession("a"); n != 3 {
		t.Fatalf("%d pages cached after forget at 14, want 3", n)
	}
	if got := len(r.path(base)); got != 3 {
		t.Fatalf("the old branch still has %d pages cached, want 3", got)
	}
	r.checkNoLeak()
}

// TestRefusedChangesNothing: a splice that cannot be done leaves the index
// and the bytes exactly as they were.
func TestRefusedChangesNothing(t *testing.T) {
	cases := []struct {
		name  string
		opts  rigOpts
		edits []Edit
		want  error
	}{
		{"overlap", rigOpts{}, []Edit{{Start: 6, End: 9}, {Start: 8, End: 12, Replacement: []uint32{1}}}, cache.ErrSpliceOverlap},
		{"past the end", rigOpts{}, []Edit{{Start: 6, End: 9}, {Start: 30, End: 41}}, cache.ErrSpliceSpan},
		{"sink", rigOpts{sink: 4}, []Edit{{Start: 3, End: 5}}, cache.ErrSpliceSink},
		{"capacity", rigOpts{pages: 11}, []Edit{{Start: 6, End: 9}, {Start: 20, End: 21}}, ErrCapacity},
		{"empty edit", rigOpts{}, []Edit{{Start: 6, End: 6}}, cache.ErrSpliceSpan},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.opts)
			base := seqTokens(10, 40)
			r.prefill("a", base)
			bytesBefore := slices.Clone(r.arena.Bytes())
			statsBefore, poolBefore := r.ix.Stats(), r.arena.Stats()
			_, err := r.sp.Splice(ctx, "a", tc.edits)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !slices.Equal(bytesBefore, r.arena.Bytes()) {
				t.Fatal("device bytes changed")
			}
			if r.ix.Stats() != statsBefore || r.arena.Stats() != poolBefore {
				t.Fatalf("index or pool changed: %+v -> %+v", statsBefore, r.ix.Stats())
			}
			if len(r.path(base)) != 10 {
				t.Fatal("the session's path changed")
			}
			if s, _ := r.sess.Session("a"); !slices.Equal(s.Tokens, base) {
				t.Fatal("the session changed")
			}
		})
	}
}

// TestFillFailure: when the engine cannot fill, the branch ends before the
// replacement and nothing leaks.
func TestFillFailure(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.LayerMajor})
	r.prefill("a", seqTokens(10, 40))
	r.failFill = true
	_, err := r.sp.Splice(ctx, "a", []Edit{{Start: 10, End: 11, Replacement: []uint32{1, 2, 3}}})
	if !errors.Is(err, ErrFill) {
		t.Fatalf("got %v, want ErrFill", err)
	}
	if n := r.checkSession("a"); n != 2 {
		t.Fatalf("%d pages cached, want the 2 before the replacement", n)
	}
	r.checkNoLeak()
}

// TestNoFiller: without an engine to fill, the branch ends before the
// replacement.
func TestNoFiller(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.PageMajor, noFill: true})
	r.prefill("a", seqTokens(10, 40))
	res, err := r.sp.Splice(ctx, "a", []Edit{{Start: 10, End: 11, Replacement: []uint32{1, 2, 3}}})
	if err != nil || res.Fills != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if n := r.checkSession("a"); n != 2 {
		t.Fatalf("%d pages cached, want 2", n)
	}
	r.checkNoLeak()
}

// TestNoFillerBuildsOnPrefilledReplacement: an engine that serves no fill
// orders (vLLM's connector) prefills the edited sequence up to the page
// after the replacement as a request of its own; the splice adopts those
// pages and moves the rest of the old branch after them, so the whole
// edited sequence is cached and nothing is left to fill.
func TestNoFillerBuildsOnPrefilledReplacement(t *testing.T) {
	for _, arr := range []layout.Arrangement{layout.LayerMajor, layout.PageMajor} {
		t.Run(arr.String(), func(t *testing.T) {
			r := newRig(t, rigOpts{arr: arr, noFill: true})
			base := seqTokens(10, 40)
			r.prefill("a", base)
			edits := []Edit{{Start: 10, End: 11, Replacement: []uint32{1, 2, 3}}}
			want := apply(base, edits)
			// The replacement ends at 13: the engine computes want[:16].
			r.cachePages(want[:16])
			res, err := r.sp.Splice(ctx, "a", edits)
			if err != nil || res.Fills != 0 {
				t.Fatalf("%+v %v", res, err)
			}
			s, _ := r.sess.Session("a")
			if !slices.Equal(s.Tokens, want) {
				t.Fatalf("session tokens %v, want %v", s.Tokens, want)
			}
			if n := r.checkSession("a"); n != len(want)/rigPage || s.Cached != n*rigPage {
				t.Fatalf("%d pages cached (session says %d tokens), want %d", n, s.Cached, len(want)/rigPage)
			}
			r.checkNoLeak()
		})
	}
}
