package blockid

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// golden.json was produced by an independent xxh3 implementation (Python's
// xxhash package) following blockid.go's rule literally, so a mismatch here means
// kvpilot's hashes would disagree with a Dynamo router's.
type goldenCase struct {
	Tokens    []uint32 `json:"tokens"`
	BlockSize int      `json:"block_size"`
	LoRA      string   `json:"lora"`
	Namespace string   `json:"namespace"`
	Local     []uint64 `json:"local"`
	Sequence  []uint64 `json:"sequence"`
}

func TestGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 5 {
		t.Fatalf("golden file holds %d cases, want at least 5", len(cases))
	}
	for i, c := range cases {
		h := Compute(c.Tokens, c.BlockSize, Salt{LoRA: c.LoRA, Namespace: c.Namespace})
		if !slices.Equal(h.Local, c.Local) || !slices.Equal(h.Sequence, c.Sequence) {
			t.Errorf("case %d (bs=%d lora=%q ns=%q): got %v / %v, want %v / %v",
				i, c.BlockSize, c.LoRA, c.Namespace, h.Local, h.Sequence, c.Local, c.Sequence)
		}
	}
}

func TestOnlyFullPagesHashed(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7}
	if h := Compute(toks, 4, Salt{}); len(h.Local) != 1 || len(h.Sequence) != 1 {
		t.Fatalf("7 tokens at page size 4: got %d pages, want 1", len(h.Local))
	}
	if h := Compute(toks[:3], 4, Salt{}); len(h.Local) != 0 {
		t.Fatalf("partial page hashed: %v", h.Local)
	}
	if h := Compute(toks, 0, Salt{}); len(h.Local) != 0 {
		t.Fatalf("page size 0 must hash nothing, got %v", h.Local)
	}
}

func TestFirstSequenceEqualsLocal(t *testing.T) {
	h := Compute([]uint32{9, 8, 7, 6, 5, 4, 3, 2}, 4, Salt{Namespace: "t"})
	if h.Sequence[0] != h.Local[0] {
		t.Fatalf("seq[0]=%d, want local[0]=%d", h.Sequence[0], h.Local[0])
	}
	if h.Sequence[1] != Chain(h.Sequence[0], h.Local[1]) {
		t.Fatalf("seq[1] is not Chain(seq[0], local[1])")
	}
}

func TestPrefixStability(t *testing.T) {
	// A page's hashes depend only on the tokens up to it: extending the
	// sequence never changes earlier pages, so prefix matches work.
	long := make([]uint32, 256)
	for i := range long {
		long[i] = uint32(i * 31)
	}
	full := Compute(long, 16, Salt{})
	part := Compute(long[:100], 16, Salt{})
	if !slices.Equal(full.Sequence[:len(part.Sequence)], part.Sequence) {
		t.Fatal("prefix hashes changed when the sequence grew")
	}
	// Same page contents after a different prefix: same local, different sequence.
	a := Compute([]uint32{1, 1, 7, 7}, 2, Salt{})
	b := Compute([]uint32{2, 2, 7, 7}, 2, Salt{})
	if a.Local[1] != b.Local[1] || a.Sequence[1] == b.Sequence[1] {
		t.Fatal("local hash must depend on the page only, sequence hash on the whole prefix")
	}
}

func TestSalts(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	base := Compute(toks, 4, Salt{}).Local[0]
	seen := map[uint64]string{base: "none"}
	for name, s := range map[string]Salt{
		"lora": {LoRA: "a"}, "ns": {Namespace: "a"}, "both": {LoRA: "a", Namespace: "a"}, "other-ns": {Namespace: "b"},
	} {
		h := Compute(toks, 4, s).Local[0]
		if prev, dup := seen[h]; dup {
			t.Errorf("salt %s hashes like %s", name, prev)
		}
		seen[h] = name
	}
	if (Salt{LoRA: "", Namespace: ""}).Seed() != BaseSeed {
		t.Fatal("empty salts must count as absent")
	}
}

func TestFromSigned(t *testing.T) {
	if FromSigned(-1) != ^uint64(0) || FromSigned(5) != 5 {
		t.Fatal("signed hashes must be bit-cast")
	}
}

func FuzzCompute(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(1), "ns")
	f.Add([]byte{}, uint8(0), "")
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, ns string) {
		toks := make([]uint32, len(raw))
		for i, b := range raw {
			toks[i] = uint32(b) * 16777619
		}
		h := Compute(toks, int(bs), Salt{Namespace: ns})
		want := 0
		if bs > 0 {
			want = len(toks) / int(bs)
		}
		if len(h.Local) != want || len(h.Sequence) != want {
			t.Fatalf("%d tokens at page size %d: %d pages, want %d", len(toks), bs, len(h.Local), want)
		}
		reused := AppendCompute(Hashes{Local: make([]uint64, 0, 4), Sequence: make([]uint64, 0, 4)}, toks, int(bs), Salt{Namespace: ns})
		if !slices.Equal(reused.Local, h.Local) || !slices.Equal(reused.Sequence, h.Sequence) {
			t.Fatal("AppendCompute disagrees with Compute")
		}
	})
}

func BenchmarkCompute32K(b *testing.B) {
	toks := make([]uint32, 32768)
	for i := range toks {
		toks[i] = uint32(i)
	}
	h := Hashes{Local: make([]uint64, 0, 512), Sequence: make([]uint64, 0, 512)}
	b.SetBytes(int64(4 * len(toks)))
	b.ReportAllocs()
	for b.Loop() {
		h = AppendCompute(Hashes{Local: h.Local[:0], Sequence: h.Sequence[:0]}, toks, 64, Salt{Namespace: "t"})
	}
}

func TestLocalMatchesPortableEncoding(t *testing.T) {
	// The in-place fast path must hash exactly the little-endian bytes.
	page := []uint32{0, 1, 0xdeadbeef, 0xffffffff, 7}
	buf := make([]byte, 0, 4*len(page))
	for _, v := range page {
		buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	for _, seed := range []uint64{BaseSeed, 0, ^uint64(0)} {
		if got, want := Local(page, seed), xxh3.HashSeed(buf, seed); got != want {
			t.Fatalf("seed %d: %d, want %d", seed, got, want)
		}
	}
}
