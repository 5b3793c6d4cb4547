package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/kvpilot/kvpilot/kernels/rope"
)

// kernelSets lists the kernel sets this machine can run: always the plain-Go
// one, and the vector one where the CPU has it.
func kernelSets() []string {
	if simdSupported {
		return []string{"generic", simdName}
	}
	return []string{"generic"}
}

// setSIMD selects the kernel set for the rest of the test.
func setSIMD(t testing.TB, set string) {
	old := simdOff.Load()
	simdOff.Store(set == "generic")
	t.Cleanup(func() { simdOff.Store(old) })
}

// forEachKernelSet runs fn as one subtest per kernel set, so every
// correctness property is checked on the vector kernels and on the
// fallback alike.
func forEachKernelSet(t *testing.T, fn func(t *testing.T)) {
	for _, set := range kernelSets() {
		t.Run(set, func(t *testing.T) {
			setSIMD(t, set)
			fn(t)
		})
	}
}

func TestKernelSetSelection(t *testing.T) {
	setSIMD(t, "generic")
	if CPUKernels() != "generic" {
		t.Fatalf("forced generic, CPUKernels() = %q", CPUKernels())
	}
	simdOff.Store(false)
	if want := map[bool]string{true: simdName, false: "generic"}[simdSupported]; CPUKernels() != want {
		t.Fatalf("CPUKernels() = %q, want %q", CPUKernels(), want)
	}
}

// oracleRotate is the scalar rotation as the engine first shipped it, the
// bit-level contract both kernel sets must reproduce, written apart from
// the kernels on purpose. One refinement: y' = x·s + y·c is spelled
// x·s − y·(−c), equal bit for bit but with the x product fixed as the first
// operand (see cpu_rotate.go), so the payload kept when both products are
// NaN no longer depends on how the compiler orders an addition. v holds one
// head's dim elements of dt; cos/sin are per pair.
func oracleRotate(dt DType, pairing rope.Pairing, v unsafe.Pointer, cos, sin []float32) {
	for i := range cos {
		a, b := i, i+len(cos)
		if pairing == rope.Interleaved {
			a, b = 2*i, 2*i+1
		}
		c, s := cos[i], sin[i]
		switch dt {
		case F32:
			e := unsafe.Slice((*float32)(v), 2*len(cos))
			x, y := e[a], e[b]
			e[a] = float32(x*c) - float32(y*s)
			e[b] = float32(x*s) - float32(y*-c)
		case BF16:
			e := unsafe.Slice((*uint16)(v), 2*len(cos))
			x, y := BF16ToF32(e[a]), BF16ToF32(e[b])
			e[a] = F32ToBF16(float32(x*c) - float32(y*s))
			e[b] = F32ToBF16(float32(x*s) - float32(y*-c))
		case F16:
			e := unsafe.Slice((*uint16)(v), 2*len(cos))
			x, y := oracleF16ToF32(e[a]), oracleF16ToF32(e[b])
			e[a] = F32ToF16(float32(x*c) - float32(y*s))
			e[b] = F32ToF16(float32(x*s) - float32(y*-c))
		case E4M3, E5M2:
			// Widened by the format's own decoding, narrowed by the
			// search over every encoding (fp8_test.go).
			f := map[DType]fp8Format{E4M3: fmtE4M3, E5M2: fmtE5M2}[dt]
			e := unsafe.Slice((*uint8)(v), 2*len(cos))
			x, y := f.widen(e[a]), f.widen(e[b])
			maxFin := float64(f.widen(f.maxFin))
			e[a] = oracleNarrow(f, float32(x*c)-float32(y*s), maxFin)
			e[b] = oracleNarrow(f, float32(x*s)-float32(y*-c), maxFin)
		}
	}
}

// oracleNarrow is the reference fp8 narrowing, NaN kept a NaN.
func oracleNarrow(f fp8Format, x float32, maxFin float64) uint8 {
	if math.IsNaN(float64(x)) {
		return uint8(math.Float32bits(x)>>24)&0x80 | f.nan
	}
	return nearestFP8(f.widen, x, maxFin)
}

// oracleF16ToF32 is the original table-free decode of a half.
func oracleF16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	v := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// specialBits are element encodings the kernels must treat exactly as the
// scalar code: zeros, infinities, quiet and signaling NaNs with payloads and
// both signs, subnormals, the extremes of the normal range, and values that
// round to a tie.
func specialBits(dt DType) []uint32 {
	switch dt {
	case F32:
		return []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff812345,
			0x7fa00000, 0x7fffffff, 0x00000001, 0x807fffff, 0x00400000, 0x00800000, 0x7f7fffff, 0xff7fffff,
			0x3f800000, 0x3f808000, 0x3f818000, 0x3f800001, 0xbf7fffff, 0x33800000, 0x387fc000, 0x477fe000}
	case E4M3, E5M2: // zeros, NaNs, infinities (e5m2), extremes, subnormals, ones
		return []uint32{0, 0x80, 0x7f, 0xff, 0x7e, 0xfe, 0x7b, 0xfb, 0x7c, 0xfc, 0x7d, 0x01, 0x81, 0x07, 0x08,
			0x03, 0x04, 0x38, 0xb8, 0x3c, 0x40}
	default: // 16-bit encodings of bf16 and fp16
		return []uint32{0, 0x8000, 0x7f80, 0xff80, 0x7c00, 0xfc00, 0x7fc0, 0xffc1, 0x7f81, 0x7e00, 0xfe01, 0x7c01,
			0x7d55, 0x7fff, 0xffff, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x0080, 0x007f, 0x7bff, 0xfbff, 0x7f7f,
			0x3c00, 0x3f80, 0x3c01, 0x3f81}
	}
}

// fillSpecial writes n elements of dt: half specials, half random bits.
func fillSpecial(rng *rand.Rand, dt DType, mem []byte) {
	sp := specialBits(dt)
	for i := 0; i+dt.Size() <= len(mem); i += dt.Size() {
		bits := rng.Uint32()
		if rng.IntN(2) == 0 {
			bits = sp[rng.IntN(len(sp))]
		}
		switch dt {
		case F32:
			*(*uint32)(unsafe.Pointer(&mem[i])) = bits
		case E4M3, E5M2:
			mem[i] = uint8(bits)
		default:
			*(*uint16)(unsafe.Pointer(&mem[i])) = uint16(bits)
		}
	}
}

// trigValue draws a table entry: real sines and cosines, exact values, and
// short-mantissa factors near 1 whose products land on rounding ties of
// bf16 and fp16 (and a few just above 1, which push the largest finite
// values to infinity).
func trigValue(rng *rand.Rand) float32 {
	switch rng.IntN(5) {
	case 0:
		return float32(math.Sin(rng.Float64() * 1e5))
	case 1:
		return []float32{0, 1, -1, 0.5, -0.5, float32(math.Copysign(0, -1)), 0.75}[rng.IntN(7)]
	case 2:
		k := rng.IntN(16) + 1
		j := rng.IntN(17) + 8
		v := 1 + float32(k)*float32(math.Ldexp(1, -j))
		if rng.IntN(2) == 0 {
			v = -v
		}
		return v
	case 3:
		return float32(rng.IntN(1<<12)-(1<<11)) / (1 << 11) // 12-bit mantissas
	}
	return float32(rng.Float64()*2 - 1)
}

// TestKernelsMatchOracleBitForBit drives every kernel set over random
// elements rich in special values, with many rotary dims (tails included),
// several heads with padded strides, rows in shuffled order with their own
// tables, some with Δ = 0 (left alone), sparse rows (prefetched) and dense
// ones, whole calls and calls split into small batches, and tables chosen
// to hit ties, and requires the oracle's bytes.
func TestKernelsMatchOracleBitForBit(t *testing.T) {
	dims := []int{2, 4, 6, 8, 10, 14, 16, 18, 22, 30, 32, 34, 48, 62, 64, 66, 96, 128, 130, 136}
	rng := rand.New(rand.NewPCG(17, 4))
	defer func(b int) { maxBatchBytes = b }(maxBatchBytes)
	for _, batch := range []int{maxBatchBytes, 100} { // 100: about a row per kernel call
		maxBatchBytes = batch
		for _, set := range kernelSets() {
			setSIMD(t, set)
			for _, dt := range dtypes {
				for _, pairing := range []rope.Pairing{rope.HalfSplit, rope.Interleaved} {
					for _, dim := range dims {
						for trial := 0; trial < 6; trial++ {
							checkRowsAgainstOracle(t, rng, set, dt, pairing, dim)
						}
					}
				}
			}
		}
	}
}

func checkRowsAgainstOracle(t *testing.T, rng *rand.Rand, set string, dt DType, pairing rope.Pairing, dim int) {
	t.Helper()
	heads := 1 + rng.IntN(3)
	stride := dim*dt.Size() + dt.Size()*rng.IntN(5)
	rowLen := heads*stride + dt.Size()*rng.IntN(3)
	if rng.IntN(2) == 0 {
		rowLen *= 3 // sparse rows: the kernels prefetch ahead
	}
	nrows := 1 + rng.IntN(12)
	ntabs := 1 + rng.IntN(3)
	half := dim / 2
	cos, sin := make([][]float32, ntabs), make([][]float32, ntabs)
	tabs := rotTables{kernel: kernelFor(dt, pairing), simd: simdEnabled(), half: half}
	for k := range cos {
		cos[k], sin[k] = make([]float32, half), make([]float32, half)
		for i := range cos[k] {
			cos[k][i], sin[k][i] = trigValue(rng), trigValue(rng)
		}
		tabs.cos, tabs.sin = append(tabs.cos, cos[k]...), append(tabs.sin, sin[k]...)
	}
	if tabs.simd {
		tabs.vw = vectorTableWidth(tabs.kernel, half)
		tabs.va, tabs.vb = make([]float32, ntabs*tabs.vw), make([]float32, ntabs*tabs.vw)
		for k := range cos {
			vectorTables(tabs.kernel, cos[k], sin[k], tabs.va[k*tabs.vw:(k+1)*tabs.vw], tabs.vb[k*tabs.vw:(k+1)*tabs.vw])
		}
	}
	slots := rng.Perm(nrows)
	deltas := make([]int, nrows)
	tabs.index = make([]int32, nrows)
	for i := range deltas {
		if rng.IntN(5) != 0 {
			deltas[i] = 1 + rng.IntN(9)
		}
		tabs.index[i] = int32(rng.IntN(ntabs))
	}
	mem := alignedBytes(nrows*rowLen + 64)
	fillSpecial(rng, dt, mem)
	want := bytes.Clone(mem)
	for i, s := range slots {
		if deltas[i] == 0 {
			continue
		}
		for h := 0; h < heads; h++ {
			oracleRotate(dt, pairing, unsafe.Pointer(&want[s*rowLen+h*stride]), cos[tabs.index[i]], sin[tabs.index[i]])
		}
	}
	tabs.rotateRows(unsafe.Pointer(&mem[0]), rowLen, &RopeSlice{Heads: heads, HeadStride: stride}, slots, deltas, 0)
	if !bytes.Equal(mem, want) {
		t.Fatalf("%s %v %v dim %d heads %d stride %d row %d: %s", set, dt, pairing, dim, heads, stride, rowLen, firstDiff(dt, mem, want))
	}
}

func firstDiff(dt DType, got, want []byte) string {
	for i := 0; i < len(got); i += dt.Size() {
		if !bytes.Equal(got[i:i+dt.Size()], want[i:i+dt.Size()]) {
			return fmt.Sprintf("element at byte %d: got % x, want % x", i, got[i:i+dt.Size()], want[i:i+dt.Size()])
		}
	}
	return "equal"
}

// TestEngineKernelSetsAgree runs whole Rotate and GatherRotateScatter calls
// with each kernel set on the same special-valued arenas, over layouts with
// rotary dims that leave vector tails, and requires identical arenas.
func TestEngineKernelSetsAgree(t *testing.T) {
	if !simdSupported {
		t.Skip("no vector kernels on this CPU: the oracle test covers the generic set")
	}
	specs := map[string]func(DType) LayoutSpec{
		"gqa-dim34-neox": func(dt DType) LayoutSpec {
			return GQASpec(dt, 40, 2, 3, 40, rope.Config{Base: 10000, Dim: 34, Pairing: rope.HalfSplit})
		},
		"gqa-dim18-gptj": func(dt DType) LayoutSpec {
			return GQASpec(dt, 40, 2, 3, 24, rope.Config{Base: 10000, Dim: 18, Pairing: rope.Interleaved})
		},
		"mla-dim6": func(dt DType) LayoutSpec {
			return MLASpec(dt, 40, 2, 10, rope.Config{Base: 10000, Dim: 6, Pairing: rope.Interleaved})
		},
		"gqa-llama3":   func(dt DType) LayoutSpec { return GQASpec(dt, 40, 2, 8, 128, cfgLlama3) },
		"mla-deepseek": func(dt DType) LayoutSpec { return MLASpec(dt, 40, 2, 512, cfgDeepSeek) },
	}
	for name, spec := range specs {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt.String(), func(t *testing.T) {
				l, err := NewLayout(spec(dt))
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(dt)))
				orig := alignedBytes(int(l.ArenaBytes()))
				fillSpecial(rng, dt, orig)
				var slots, deltas, src []int
				for s := 0; s < l.Slots(); s++ {
					if rng.IntN(4) != 0 {
						slots = append(slots, s)
						deltas = append(deltas, rng.IntN(1<<18)-(1<<17))
						src = append(src, rng.IntN(l.Slots()))
					}
				}
				run := func(set string) []byte {
					setSIMD(t, set)
					a := Arena{Layout: l, Host: alignedBytes(len(orig))}
					copy(a.Host, orig)
					e := testEngine()
					if err := e.Rotate(a, slots, deltas); err != nil {
						t.Fatal(err)
					}
					if err := e.GatherRotateScatter(a, src, slots, deltas); err != nil {
						t.Fatal(err)
					}
					return a.Host
				}
				generic, vector := run("generic"), run(simdName)
				if !bytes.Equal(generic, vector) {
					t.Fatalf("arenas differ: %s", firstDiff(dt, vector, generic))
				}
				if bytes.Equal(generic, orig) {
					t.Fatal("nothing was rotated")
				}
			})
		}
	}
}
