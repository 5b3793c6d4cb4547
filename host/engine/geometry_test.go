package engine_test

import (
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// The engine finds rows with sdk/enginewire's geometry; the host's pools
// use host/layout's. They must agree byte for byte.
func TestEngineGeometryMatchesHostLayout(t *testing.T) {
	pairs := []struct {
		host layout.Layout
		sdk  enginewire.Layout
	}{
		{layout.MHA("m", 16, layout.BF16, 3, 4, 64, 32, layout.HalfSplit), enginewire.Layout{Model: "m", PageSize: 16, DType: "bf16", Layers: 3,
			Buffers: []enginewire.Buffer{{Name: "k", Heads: 4, HeadDim: 64}, {Name: "v", Heads: 4, HeadDim: 64}},
			Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 32, Style: "half_split"}}},
		{layout.MLA("d", 64, layout.FP32, 2, 512, 64, layout.Interleaved), enginewire.Layout{Model: "d", PageSize: 64, DType: "fp32", Layers: 2,
			Buffers: []enginewire.Buffer{{Name: "kv", Heads: 1, HeadDim: 576}},
			Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 512, Dim: 64, Style: "interleaved"}}},
	}
	for _, p := range pairs {
		h, s := p.host, p.sdk
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		if h.PageBytes() != s.PageBytes() || h.LayerPageBytes() != s.LayerPageBytes() {
			t.Fatalf("%s: page bytes %d vs %d", h.Model, h.PageBytes(), s.PageBytes())
		}
		for _, arr := range []struct {
			h layout.Arrangement
			s enginewire.Arrangement
		}{{layout.PageMajor, enginewire.PageMajor}, {layout.LayerMajor, enginewire.LayerMajor}} {
			if arr.h.String() != string(arr.s) {
				t.Fatalf("arrangement names %s vs %s", arr.h, arr.s)
			}
			for slot := 0; slot < 5; slot++ {
				for layer := 0; layer < h.Layers; layer++ {
					for buf := range h.Buffers {
						a := h.ArenaSegmentOffset(arr.h, 5, slot, layer, buf)
						b := s.ArenaSegmentOffset(arr.s, 5, slot, layer, buf)
						if a != b || h.SegmentBytes(buf) != s.SegmentBytes(buf) || h.PageSegmentOffset(layer, buf) != s.PageSegmentOffset(layer, buf) {
							t.Fatalf("%s %s slot %d layer %d buf %d: %d vs %d", h.Model, arr.h, slot, layer, buf, a, b)
						}
					}
				}
			}
		}
	}
}
