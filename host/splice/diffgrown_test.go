package splice

import (
	"slices"
	"testing"
)

func TestDiffGrown(t *testing.T) {
	old := seqTokens(0, 100)
	header := []uint32{5000, 5001}
	cases := []struct {
		name string
		new  []uint32
		want Edit
		ok   bool
	}{
		{"replace and grow", cat(old[:30], []uint32{900, 901}, old[50:], seqTokens(7000, 20)),
			Edit{Start: 30, End: 50, Replacement: []uint32{900, 901}}, true},
		{"delete and grow", cat(old[:30], old[60:], seqTokens(7000, 5)),
			Edit{Start: 30, End: 60, Replacement: []uint32{}}, true},
		{"two edits become one span", cat(old[:10], []uint32{1}, old[20:40], []uint32{2}, old[50:], seqTokens(7000, 5)),
			Edit{Start: 10, End: 50, Replacement: cat([]uint32{1}, old[20:40], []uint32{2})}, true},
		{"extends old", cat(old, seqTokens(7000, 5)), Edit{}, false},
		{"tail gone", cat(old[:30], seqTokens(7000, 50)), Edit{}, false},
		{"edit inside the anchor", cat(old[:95], []uint32{1}, seqTokens(7000, 5)), Edit{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := DiffGrown(old, tc.new)
			if ok != tc.ok || got.Start != tc.want.Start || got.End != tc.want.End || !slices.Equal(got.Replacement, tc.want.Replacement) {
				t.Fatalf("DiffGrown = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			if ok {
				if edited := apply(old, []Edit{got}); !slices.Equal(edited, tc.new[:len(edited)]) {
					t.Fatalf("the edit does not turn old into a prefix of new")
				}
			}
		})
	}
	// A repeated header: old's tail recurs earlier in new; the place that
	// keeps the longest tail wins.
	o := cat(seqTokens(0, 40), header, seqTokens(300, 6), seqTokens(200, 30), header, seqTokens(300, 6))
	n := cat(o[:40], []uint32{9}, o[40:], seqTokens(7000, 9))
	got, ok := DiffGrown(o, n)
	if !ok || got.Start != 40 || got.End != 40 || !slices.Equal(got.Replacement, []uint32{9}) {
		t.Fatalf("repeated header: %+v %v", got, ok)
	}
}

func FuzzDiffGrown(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, []byte{1, 2, 9, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		old, new := widen(a), widen(b)
		e, ok := DiffGrown(old, new)
		if !ok {
			return
		}
		if e.Start < 0 || e.End < e.Start || e.End > len(old) {
			t.Fatalf("edit %+v of %d tokens", e, len(old))
		}
		edited := apply(old, []Edit{e})
		if len(edited) > len(new) || !slices.Equal(edited, new[:len(edited)]) {
			t.Fatalf("edit %+v does not turn old into a prefix of new", e)
		}
	})
}

func widen(b []byte) []uint32 {
	out := make([]uint32, len(b))
	for i, x := range b {
		out[i] = uint32(x % 4)
	}
	return out
}
