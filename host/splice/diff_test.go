package splice

import (
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
)

// checkDiff verifies Diff's contract: edits sorted, non-overlapping and in
// bounds, and old with them applied is a prefix of new.
func checkDiff(t *testing.T, old []uint32, om []Span, new []uint32, nm []Span) []Edit {
	t.Helper()
	edits := Diff(old, om, new, nm)
	end := 0
	for k, e := range edits {
		if e.Start < end || e.End < e.Start || e.End > len(old) || (e.Start == e.End && len(e.Replacement) == 0) {
			t.Fatalf("edit %d %+v invalid (previous end %d, old %d tokens)", k, e, end, len(old))
		}
		if k > 0 && e.Start == e.End && edits[k-1].Start == edits[k-1].End && e.Start == edits[k-1].Start {
			t.Fatalf("two insertions at %d", e.Start)
		}
		end = e.End
	}
	got := apply(old, edits)
	if len(got) > len(new) || !slices.Equal(got, new[:len(got)]) {
		t.Fatalf("old %v with edits %+v is %v, not a prefix of new %v", old, edits, got, new)
	}
	return edits
}

func TestDiff(t *testing.T) {
	sys, u1, a1, u2 := seqTokens(1, 6), seqTokens(100, 5), seqTokens(200, 7), seqTokens(300, 4)
	edited := seqTokens(400, 2)
	old := cat(sys, u1, a1)
	oldMsgs := []Span{{0, 6}, {6, 11}, {11, 18}}

	// The harness replaced u1 and appended u2: message diff keeps a1.
	new := cat(sys, edited, a1, u2)
	newMsgs := []Span{{0, 6}, {6, 8}, {8, 15}, {15, 19}}
	edits := checkDiff(t, old, oldMsgs, new, newMsgs)
	if len(edits) != 1 || edits[0].Start != 6 || edits[0].End != 11 || !slices.Equal(edits[0].Replacement, edited) {
		t.Fatalf("message diff %+v", edits)
	}
	if !Worth(edits, len(old), 0) || Worth(edits, len(old), 7) {
		t.Fatal("Worth")
	}

	// Without spans the appended turn hides the common suffix: only a
	// truncation, not worth splicing.
	edits = checkDiff(t, old, nil, new, nil)
	if Worth(edits, len(old), 0) {
		t.Fatalf("token diff %+v should not be worth splicing", edits)
	}
	// A pure history edit without an append is found at token level.
	edits = checkDiff(t, old, nil, cat(sys, edited, a1), nil)
	if len(edits) != 1 || edits[0].Start != 6 || edits[0].End != 11 || !Worth(edits, len(old), 0) {
		t.Fatalf("token diff %+v", edits)
	}
	// New extends old: nothing to edit.
	if edits := checkDiff(t, old, nil, cat(old, u2), nil); len(edits) != 0 {
		t.Fatalf("append diff %+v", edits)
	}
	// A dropped message.
	edits = checkDiff(t, old, oldMsgs, cat(sys, a1, u2), []Span{{0, 6}, {6, 13}, {13, 17}})
	if len(edits) != 1 || edits[0].Start != 6 || edits[0].End != 11 || len(edits[0].Replacement) != 0 {
		t.Fatalf("drop diff %+v", edits)
	}
}

func FuzzDiff(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6}, []byte{1, 9, 3, 4, 5, 6, 7}, uint8(2), uint8(3))
	f.Add([]byte{}, []byte{1}, uint8(0), uint8(1))
	f.Add([]byte{5, 5, 5, 5}, []byte{5, 5}, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, a, b []byte, ma, mb uint8) {
		old, new := make([]uint32, len(a)), make([]uint32, len(b))
		for i, x := range a {
			old[i] = uint32(x % 8)
		}
		for i, x := range b {
			new[i] = uint32(x % 8)
		}
		checkDiff(t, old, nil, new, nil)
		checkDiff(t, old, spansOf(len(old), int(ma)), new, spansOf(len(new), int(mb)))
		// Malformed spans fall back to token level.
		checkDiff(t, old, []Span{{0, len(old) + 1}}, new, []Span{{1, 0}})
	})
}

// spansOf cuts n tokens into messages of a varying length.
func spansOf(n, seed int) []Span {
	var out []Span
	for s, k := 0, 0; s < n; k++ {
		l := 1 + (seed+k*7)%5
		out = append(out, Span{s, min(n, s+l)})
		s += l
	}
	return out
}

// TestAutoSplice: a replayed conversation whose early turn was edited is
// spliced, and the turns after the edit stay cached at their new places.
func TestAutoSplice(t *testing.T) {
	r := newRig(t, rigOpts{arr: layout.LayerMajor, sink: 4})
	sys, u1, a1 := seqTokens(1, 8), seqTokens(100, 6), seqTokens(200, 14)
	old := cat(sys, u1, a1)
	r.prefill("s", old)
	edited := seqTokens(400, 3)
	new := cat(sys, edited, a1, seqTokens(300, 5))
	res, did, err := r.sp.AutoSplice(ctx, "s", []Span{{0, 8}, {8, 14}, {14, 28}}, new, []Span{{0, 8}, {8, 11}, {11, 25}, {25, 30}})
	if err != nil || !did {
		t.Fatalf("auto splice: %v %v", did, err)
	}
	if res.Fills != 1 || r.checkSession("s") != 25/rigPage {
		t.Fatalf("%+v", res)
	}
	if got := len(r.path(new)); got != 6 {
		t.Fatalf("%d pages of the new request cached, want 6", got)
	}
	r.checkNoLeak()
	// Nothing to do for a plain append.
	if _, did, err := r.sp.AutoSplice(ctx, "s", nil, cat(new, seqTokens(9, 3)), nil); did || err != nil {
		t.Fatalf("append spliced: %v %v", did, err)
	}
}
