package layout

import (
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// Arrangement is how an arena of many pages places them in memory.
type Arrangement uint8

const (
	// PageMajor stores each page contiguously in canonical order: page i is
	// bytes [i·PageBytes, (i+1)·PageBytes). Tier copies are one memcpy.
	PageMajor Arrangement = iota
	// LayerMajor stores, for each layer and buffer, all slots' rows
	// contiguously, the way engines hold one tensor per layer
	// ([slots·PageSize, heads, head_dim]). An engine can view each
	// (layer, buffer) region as its per-layer tensor; a page is gathered
	// from Layers×len(Buffers) segments.
	LayerMajor
)

func (a Arrangement) String() string {
	switch a {
	case PageMajor:
		return "page_major"
	case LayerMajor:
		return "layer_major"
	}
	return fmt.Sprintf("arrangement(%d)", uint8(a))
}

// ParseArrangement reads the String form.
func ParseArrangement(s string) (Arrangement, error) {
	switch s {
	case "page_major":
		return PageMajor, nil
	case "layer_major":
		return LayerMajor, nil
	}
	return 0, fmt.Errorf("%w: unknown arrangement %q: want page_major or layer_major", ErrInvalid, s)
}

// PageSegmentOffset is where the (layer, buf) segment starts inside one
// canonical page.
func (l *Layout) PageSegmentOffset(layer, buf int) int64 {
	return l.ArenaSegmentOffset(PageMajor, 1, 0, layer, buf)
}

// ArenaSegmentOffset is where the (layer, buf) segment of page slot starts
// in an arena of slots pages arranged as arr. The segment is SegmentBytes(buf)
// long and contiguous in both arrangements. The math is the engine wire's
// (enginewire.SegmentOffset): host and engine must agree on it byte for
// byte.
func (l *Layout) ArenaSegmentOffset(arr Arrangement, slots, slot, layer, buf int) int64 {
	prior := 0
	for b := 0; b < buf; b++ {
		prior += l.SegmentBytes(b)
	}
	return enginewire.SegmentOffset(arr == PageMajor, l.Layers, l.LayerPageBytes(), prior, l.SegmentBytes(buf), slots, slot, layer)
}

// ArenaRegionOffset is where the per-layer tensor of (layer, buf) starts in
// a LayerMajor arena of slots pages; the engine views slots·PageSize rows
// from there.
func (l *Layout) ArenaRegionOffset(slots, layer, buf int) int64 {
	return l.ArenaSegmentOffset(LayerMajor, slots, 0, layer, buf)
}
