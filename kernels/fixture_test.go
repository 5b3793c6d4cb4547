package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

var (
	cfgLlama3 = rope.Config{Base: 500000, Dim: 128, Pairing: rope.HalfSplit, Scaling: rope.Scaling{
		Type: rope.ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 8192}}
	cfgDeepSeek = rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved, Scaling: rope.Scaling{
		Type: rope.ScalingYaRN, Factor: 40, OriginalMaxPosition: 4096, BetaFast: 32, BetaSlow: 1, MScale: 0.707, MScaleAllDim: 0.707}}
	// cfgYaRNScaled carries a non-unit attention factor (1.369): the
	// rotation must not apply it again.
	cfgYaRNScaled = rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved, Scaling: rope.Scaling{
		Type: rope.ScalingYaRN, Factor: 40, OriginalMaxPosition: 4096, MScale: 0.707}}
	cfgQwen    = rope.Config{Base: 1e6, Dim: 128, Pairing: rope.HalfSplit}
	cfgPartial = rope.Config{Base: 10000, Dim: 32, Pairing: rope.HalfSplit}                                                               // head_dim 128, partial_rotary_factor 0.25
	cfgLinear  = rope.Config{Base: 10000, Dim: 64, Pairing: rope.Interleaved, Scaling: rope.Scaling{Type: rope.ScalingLinear, Factor: 4}} // GPT-J style
)

type layoutCase struct {
	name string
	spec func(dt DType) LayoutSpec
}

// layoutCases cover a GQA row (K and V buffers, several heads, full and
// partial rotary) and an MLA row [kv_c 512 | k_pe 64], with every pairing
// and scaling type.
var layoutCases = []layoutCase{
	{"gqa-qwen-neox", func(dt DType) LayoutSpec { return GQASpec(dt, 48, 2, 4, 128, cfgQwen) }},
	{"gqa-llama3", func(dt DType) LayoutSpec { return GQASpec(dt, 48, 2, 8, 128, cfgLlama3) }},
	{"gqa-partial-rotary", func(dt DType) LayoutSpec { return GQASpec(dt, 48, 2, 2, 128, cfgPartial) }},
	{"gqa-linear-interleaved", func(dt DType) LayoutSpec { return GQASpec(dt, 48, 2, 2, 64, cfgLinear) }},
	{"mla-deepseek-yarn", func(dt DType) LayoutSpec { return MLASpec(dt, 48, 3, 512, cfgDeepSeek) }},
	{"mla-yarn-mscale", func(dt DType) LayoutSpec { return MLASpec(dt, 48, 2, 512, cfgYaRNScaled) }},
}

var dtypes = []DType{F32, BF16, F16, E4M3, E5M2}

// kvFixture is an arena whose RoPE slices hold RoPE(k, pos[slot]) for known
// float64 keys k, and whose other bytes are random.
type kvFixture struct {
	a    Arena
	rot  *rope.Rotary
	pos  []int
	keys map[[3]int][]float64 // (buffer, slot, head) -> unrotated key
}

func newFixture(t testing.TB, spec LayoutSpec, seed uint64) *kvFixture {
	t.Helper()
	l, err := NewLayout(spec)
	if err != nil {
		t.Fatalf("NewLayout: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := alignedBytes(int(l.ArenaBytes()))
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	f := &kvFixture{a: Arena{Layout: l, Host: mem}, rot: l.Rotary(), pos: make([]int, l.Slots()), keys: map[[3]int][]float64{}}
	for s := range f.pos {
		f.pos[s] = rng.IntN(128 << 10)
	}
	for _, b := range l.ropeBuf {
		for s := 0; s < l.Slots(); s++ {
			for h := 0; h < l.Buffer(b).Rope.Heads; h++ {
				k := make([]float64, f.rot.Dim())
				for i := range k {
					k[i] = rng.NormFloat64()
				}
				f.keys[[3]int{b, s, h}] = k
				v := append([]float64(nil), k...)
				if err := f.rot.Apply(v, f.pos[s]); err != nil {
					t.Fatal(err)
				}
				f.store(b, s, h, v)
			}
		}
	}
	return f
}

// alignedBytes returns a zeroed slice whose base is 8-byte aligned.
func alignedBytes(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

func (f *kvFixture) sliceOff(b, slot, h, i int) int64 {
	buf := f.a.Layout.Buffer(b)
	return buf.Offset + int64(slot)*int64(buf.RowBytes) + int64(buf.Rope.Offset+h*buf.Rope.HeadStride+i*f.a.Layout.DType().Size())
}

func (f *kvFixture) store(b, slot, h int, v []float64) {
	for i, x := range v {
		storeElem(f.a.Host, f.sliceOff(b, slot, h, i), f.a.Layout.DType(), float32(x))
	}
}

func (f *kvFixture) load(b, slot, h int) []float64 {
	out := make([]float64, f.rot.Dim())
	for i := range out {
		out[i] = float64(loadElem(f.a.Host, f.sliceOff(b, slot, h, i), f.a.Layout.DType()))
	}
	return out
}

func storeElem(mem []byte, off int64, dt DType, x float32) {
	switch dt {
	case F32:
		*(*float32)(unsafe.Pointer(&mem[off])) = x
	case BF16:
		*(*uint16)(unsafe.Pointer(&mem[off])) = F32ToBF16(x)
	case F16:
		*(*uint16)(unsafe.Pointer(&mem[off])) = F32ToF16(x)
	case E4M3:
		mem[off] = F32ToE4M3(x)
	case E5M2:
		mem[off] = F32ToE5M2(x)
	}
}

func loadElem(mem []byte, off int64, dt DType) float32 {
	switch dt {
	case F32:
		return *(*float32)(unsafe.Pointer(&mem[off]))
	case BF16:
		return BF16ToF32(*(*uint16)(unsafe.Pointer(&mem[off])))
	case E4M3:
		return E4M3ToF32(mem[off])
	case E5M2:
		return E5M2ToF32(mem[off])
	default:
		return F16ToF32(*(*uint16)(unsafe.Pointer(&mem[off])))
	}
}

// ropeMask marks the RoPE-slice bytes of the given slots.
func (f *kvFixture) ropeMask(slots []int) []bool {
	l := f.a.Layout
	mask := make([]bool, len(f.a.Host))
	for _, b := range l.ropeBuf {
		r := l.Buffer(b).Rope
		for _, s := range slots {
			for h := 0; h < r.Heads; h++ {
				lo := f.sliceOff(b, s, h, 0)
				for i := int64(0); i < int64(f.rot.Dim()*l.DType().Size()); i++ {
					mask[lo+i] = true
				}
			}
		}
	}
	return mask
}

// storageULP is the spacing of dt's values at magnitude |x|.
func storageULP(dt DType, x float64) float64 {
	x = math.Abs(x)
	mant, minExp := 24, -126
	switch dt {
	case BF16:
		mant = 8
	case F16:
		mant, minExp = 11, -14
	case E4M3:
		mant, minExp = 4, -6
	case E5M2:
		mant, minExp = 3, -14
	}
	e := minExp
	if x > 0 {
		_, e2 := math.Frexp(x) // x = frac·2^e2, frac in [0.5, 1)
		e = max(e2-1, minExp)
	}
	return math.Ldexp(1, e-(mant-1))
}

func pairNorm(v []float64, c rope.Config, elem int) float64 {
	for i := 0; i < c.Dim/2; i++ {
		a, b := c.Pair(i)
		if a == elem || b == elem {
			return math.Hypot(v[a], v[b])
		}
	}
	return 0
}
