package layout

import "fmt"

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
	off := int64(layer) * int64(l.LayerPageBytes())
	for b := 0; b < buf; b++ {
		off += int64(l.SegmentBytes(b))
	}
	return off
}

// ArenaSegmentOffset is where the (layer, buf) segment of page slot starts
// in an arena of slots pages arranged as arr. The segment is SegmentBytes(buf)
// long and contiguous in both arrangements.
func (l *Layout) ArenaSegmentOffset(arr Arrangement, slots, slot, layer, buf int) int64 {
	if arr == PageMajor {
		return int64(slot)*int64(l.PageBytes()) + l.PageSegmentOffset(layer, buf)
	}
	// LayerMajor: region (layer, buf) holds slots segments back to back.
	region := int64(layer) * int64(slots) * int64(l.LayerPageBytes())
	for b := 0; b < buf; b++ {
		region += int64(slots) * int64(l.SegmentBytes(b))
	}
	return region + int64(slot)*int64(l.SegmentBytes(buf))
}

// ArenaRegionOffset is where the per-layer tensor of (layer, buf) starts in
// a LayerMajor arena of slots pages; the engine views slots·PageSize rows
// from there.
func (l *Layout) ArenaRegionOffset(slots, layer, buf int) int64 {
	return l.ArenaSegmentOffset(LayerMajor, slots, 0, layer, buf)
}
