package splice

import (
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
)

// marked lists the positions echoes marks, from lo.
func marked(m []bool, lo int) []int {
	var out []int
	for i, ok := range m {
		if ok {
			out = append(out, lo+i)
		}
	}
	return out
}

// TestEchoes: a run of EchoGram tokens that a removed span holds marks
// every position in it; a shorter one, a run split between two removed
// spans, or one that starts before lo marks nothing.
func TestEchoes(t *testing.T) {
	removed := [][]uint32{seqTokens(100, 12), seqTokens(200, 5)}
	edited := seqTokens(0, 10)                               // 0..9: no echo
	edited = append(edited, seqTokens(103, EchoGram+1)...)   // 10..18: removed[0][3:12]
	edited = append(edited, seqTokens(100, EchoGram-1)...)   // 19..25: too short
	edited = append(edited, 203, 204, 100, 101, 102, 103, 0) // 26..32: across two spans
	edited = append(edited, seqTokens(104, EchoGram)...)     // 33..40: echoes again
	edited = append(edited, seqTokens(50, 3)...)             // 41..43
	want := append(seqInts(10, 19), seqInts(33, 41)...)
	if got := marked(echoes(edited, 0, len(edited), removed), 0); !slices.Equal(got, want) {
		t.Fatalf("echoes %v, want %v", got, want)
	}
	// From 12 on, the first run starts at 12 and still spans 8 tokens
	// (12..18 is 7): only the second run is whole.
	if got := marked(echoes(edited, 12, len(edited), removed), 12); !slices.Equal(got, seqInts(33, 41)) {
		t.Fatalf("echoes from 12: %v, want 33..40", got)
	}
	if m := echoes(edited, 0, len(edited), nil); m != nil {
		t.Fatalf("echoes of nothing removed: %v", m)
	}
	if m := echoes(edited, 41, 100, removed); m != nil {
		t.Fatalf("a range shorter than a run: %v", m)
	}
}

// seqInts is lo..hi-1.
func seqInts(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestRecomputeEcho: with the guard, the candidates that repeat the
// removed text are named in the order; with a share alone, none are.
func TestRecomputeEcho(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   Recompute
		echo bool
	}{
		{"guard", Recompute{MaxKL: 0.005}, true},
		{"share", Recompute{Share: 0.5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{arr: layout.LayerMajor, recompute: true, rule: tc.rc})
			// 10 distinct tokens, 10 to remove, two more, then those 10
			// again (the kept text quotes what the edit removes), then 20.
			base := append(seqTokens(1000, 10), seqTokens(500, 10)...)
			base = append(base, 3000, 3001)
			base = append(base, seqTokens(500, 10)...)
			base = append(base, seqTokens(2000, 20)...)
			r.prefill("a", base)
			if _, err := r.sp.Splice(ctx, "a", []Edit{{Start: 10, End: 20}}); err != nil {
				t.Fatal(err)
			}
			c := r.fills[0].Candidates
			var got []int
			for _, q := range c.Echo {
				got = append(got, int(q))
			}
			// The quoted copy now sits at 12..21.
			if want := seqInts(12, 22); tc.echo != slices.Equal(got, want) || !tc.echo && got != nil {
				t.Fatalf("echo %v (guard %v), want 12..21 with the guard only", got, tc.echo)
			}
			r.checkNoLeak()
		})
	}
}
