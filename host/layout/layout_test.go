package layout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func llama() Layout { return MHA("llama-3-8b", 16, BF16, 32, 8, 128, 128, HalfSplit) }

func TestSizes(t *testing.T) {
	l := llama()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	// K and V, 8 heads × 128 × 2 bytes each, 32 layers.
	if got, want := l.TokenBytes(), 2*8*128*2*32; got != want {
		t.Fatalf("TokenBytes = %d, want %d", got, want)
	}
	if got, want := l.PageBytes(), 16*2*8*128*2*32; got != want {
		t.Fatalf("PageBytes = %d, want %d", got, want)
	}
	m := MLA("deepseek-v3", 64, FP8E4M3, 61, 512, 64, Interleaved)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := m.RowBytes(0), 576; got != want {
		t.Fatalf("MLA RowBytes = %d, want %d", got, want)
	}
	if got, want := m.PageBytes(), 64*576*61; got != want {
		t.Fatalf("MLA PageBytes = %d, want %d", got, want)
	}
	if m.Rope.Offset != 512 || m.Rope.Dim != 64 || m.Rope.Style != Interleaved {
		t.Fatalf("MLA rope slice = %+v", *m.Rope)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Layout)
		want string // substring of the error; "" means valid
	}{
		{"ok", func(*Layout) {}, ""},
		{"no rope", func(l *Layout) { l.Rope = nil }, ""},
		{"empty model", func(l *Layout) { l.Model = "" }, "model name is empty"},
		{"page size 0", func(l *Layout) { l.PageSize = 0 }, "page_size 0"},
		{"page size huge", func(l *Layout) { l.PageSize = MaxPageSize + 1 }, "page_size"},
		{"dtype", func(l *Layout) { l.DType = 99 }, "dtype"},
		{"layers", func(l *Layout) { l.Layers = 0 }, "layers 0"},
		{"no buffers", func(l *Layout) { l.Buffers = nil }, "0 buffers"},
		{"dup buffer", func(l *Layout) { l.Buffers[1].Name = "k" }, "used twice"},
		{"heads", func(l *Layout) { l.Buffers[0].Heads = 0 }, "heads 0"},
		{"head dim", func(l *Layout) { l.Buffers[1].HeadDim = -1 }, "head_dim -1"},
		{"rope buffer", func(l *Layout) { l.Rope.Buffer = 2 }, "rope.buffer 2"},
		{"rope odd", func(l *Layout) { l.Rope.Dim = 63 }, "even"},
		{"rope overflow", func(l *Layout) { l.Rope.Offset = 64 }, "does not fit"},
		{"rope style", func(l *Layout) { l.Rope.Style = 0 }, "rope.style"},
		{"page too big", func(l *Layout) { l.PageSize = 4096; l.Layers = 1024 }, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := llama()
			tc.edit(&l)
			err := l.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	base := llama()
	fp := base.Fingerprint()
	// The golden value pins the canonical encoding: if it changes, every
	// page on disk and in remote buckets becomes unreadable, which must be a
	// deliberate decision (bump canonicalVersion).
	const golden = "bcacc25117cbffa2"
	if fp.String() != golden {
		t.Logf("fingerprint changed: got %s (update golden only if the encoding change is deliberate)", fp)
		t.Fail()
	}
	if again := llama(); again.Fingerprint() != fp {
		t.Fatal("fingerprint is not deterministic")
	}
	edits := []func(*Layout){
		func(l *Layout) { l.Model = "llama-3-8b-instruct" },
		func(l *Layout) { l.PageSize = 32 },
		func(l *Layout) { l.DType = FP16 },
		func(l *Layout) { l.Layers = 31 },
		func(l *Layout) { l.Buffers[0].Name = "key" },
		func(l *Layout) { l.Buffers[0].Heads = 4 },
		func(l *Layout) { l.Buffers[1].HeadDim = 64 },
		func(l *Layout) { l.Rope = nil },
		func(l *Layout) { l.Rope.Dim = 64 },
		func(l *Layout) { l.Rope.Offset = 2 },
		func(l *Layout) { l.Rope.Style = Interleaved },
	}
	seen := map[Fingerprint]int{fp: -1}
	for i, e := range edits {
		l := llama()
		e(&l)
		f := l.Fingerprint()
		if j, dup := seen[f]; dup {
			t.Fatalf("edit %d has the same fingerprint as %d", i, j)
		}
		seen[f] = i
	}
	p, err := ParseFingerprint(fp.String())
	if err != nil || p != fp {
		t.Fatalf("ParseFingerprint round trip: %v %v", p, err)
	}
	if _, err := ParseFingerprint("xyz"); err == nil {
		t.Fatal("ParseFingerprint accepted garbage")
	}
}

func TestJSONRoundTrip(t *testing.T) {
	l := llama()
	b, err := json.Marshal(&l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"dtype":"bf16"`) || !strings.Contains(string(b), `"style":"half_split"`) {
		t.Fatalf("JSON does not use names: %s", b)
	}
	var back Layout
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Fingerprint() != l.Fingerprint() {
		t.Fatal("JSON round trip changed the fingerprint")
	}
	var bad Layout
	if err := json.Unmarshal([]byte(`{"dtype":"int4"}`), &bad); err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown dtype accepted: %v", err)
	}
	for _, s := range []string{"torch.bfloat16", "half", "fp8"} {
		if _, err := ParseDType(s); err != nil {
			t.Errorf("ParseDType(%q): %v", s, err)
		}
	}
}

func TestClone(t *testing.T) {
	l := llama()
	c := l.Clone()
	c.Buffers[0].Heads = 1
	c.Rope.Dim = 2
	if l.Buffers[0].Heads != 8 || l.Rope.Dim != 128 {
		t.Fatal("Clone shares memory with the original")
	}
}

// TestArenaOffsets checks that in both arrangements every (slot, layer,
// buffer) segment lies inside the arena and no two overlap: the tiling is
// exact.
func TestArenaOffsets(t *testing.T) {
	l := Layout{Model: "m", PageSize: 3, DType: FP16, Layers: 4,
		Buffers: []Buffer{{Name: "k", Heads: 2, HeadDim: 6}, {Name: "v", Heads: 1, HeadDim: 10}}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	const slots = 5
	size := slots * l.PageBytes()
	for _, arr := range []Arrangement{PageMajor, LayerMajor} {
		covered := make([]int, size)
		for s := 0; s < slots; s++ {
			for layer := 0; layer < l.Layers; layer++ {
				for b := range l.Buffers {
					off := l.ArenaSegmentOffset(arr, slots, s, layer, b)
					n := l.SegmentBytes(b)
					if off < 0 || off+int64(n) > int64(size) {
						t.Fatalf("%v: segment (%d,%d,%d) at %d+%d outside arena %d", arr, s, layer, b, off, n, size)
					}
					for i := off; i < off+int64(n); i++ {
						covered[i]++
					}
				}
			}
		}
		for i, c := range covered {
			if c != 1 {
				t.Fatalf("%v: byte %d covered %d times", arr, i, c)
			}
		}
	}
	// Page-major segment offsets inside a page tile the page too.
	if got := l.PageSegmentOffset(l.Layers-1, 1) + int64(l.SegmentBytes(1)); got != int64(l.PageBytes()) {
		t.Fatalf("last segment ends at %d, page is %d", got, l.PageBytes())
	}
	if a, err := ParseArrangement(LayerMajor.String()); err != nil || a != LayerMajor {
		t.Fatalf("ParseArrangement: %v %v", a, err)
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("m", 16, uint8(2), 32, 8, 128, 0, 64, uint8(2))
	f.Fuzz(func(t *testing.T, model string, page int, dt uint8, layers, heads, hd, roff, rdim int, style uint8) {
		l := Layout{Model: model, PageSize: page, DType: DType(dt), Layers: layers,
			Buffers: []Buffer{{Name: "k", Heads: heads, HeadDim: hd}},
			Rope:    &RopeSlice{Offset: roff, Dim: rdim, Style: RopeStyle(style)}}
		if l.Validate() == nil {
			if l.PageBytes() <= 0 || l.PageBytes() > MaxPageBytes {
				t.Fatalf("valid layout with PageBytes %d", l.PageBytes())
			}
			_ = l.Fingerprint()
		}
	})
}
