package cuda

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// TestDeltaArgs needs no GPU: a call's table index and tables, as staged
// for the kernels.
func TestDeltaArgs(t *testing.T) {
	r, err := rope.New(rope.Config{Base: 10000, Dim: 8, Pairing: rope.HalfSplit})
	if err != nil {
		t.Fatal(err)
	}
	var e Engine
	for range 2 { // the second call reuses the first's working memory
		deltas := []int{0, 5, 5, -3, 5, 0, 7, 7}
		e.indexDeltas(deltas)
		if want := []int32{-1, 0, 0, 1, 0, -1, 2, 2}; !slices.Equal(e.st.tab, want) {
			t.Fatalf("index %v, want %v", e.st.tab, want)
		}
		if want := []int{5, -3, 7}; !slices.Equal(e.st.distinct, want) {
			t.Fatalf("distinct %v, want %v", e.st.distinct, want)
		}
		idxBytes, tabBytes := e.deltaSizes(r)
		if idxBytes != 4*len(deltas) || tabBytes != 4*4*3 {
			t.Fatalf("sizes %d, %d", idxBytes, tabBytes)
		}
		idx, cos, sin := make([]byte, idxBytes), make([]byte, tabBytes), make([]byte, tabBytes)
		e.putDeltas(r, idx, cos, sin)
		if got := int32(binary.LittleEndian.Uint32(idx[4*5:])); got != -1 {
			t.Fatalf("index of Δ 0 encoded as %d", got)
		}
		c, s := make([]float32, 4), make([]float32, 4)
		for k, d := range e.st.distinct {
			if err := r.DeltaTable(d, c, s); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				o := 4 * (4*k + i)
				if math.Float32frombits(binary.LittleEndian.Uint32(cos[o:])) != c[i] ||
					math.Float32frombits(binary.LittleEndian.Uint32(sin[o:])) != s[i] {
					t.Fatalf("Δ %d: table entry %d differs from the CPU engine's", d, i)
				}
			}
		}
	}
}
