package kernels

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"unsafe"
)

// Test hooks in simd_amd64.s: the vector kernels' conversions on arrays.
// n must be a positive multiple of 16.

// narrowBF16AVX2: per block of 16, dst[k] = bf16(src[8+k])<<16 | bf16(src[k]).
//
//go:noescape
func narrowBF16AVX2(dst *uint32, src *float32, n int)

//go:noescape
func narrowF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func widenF16AVX2(dst *float32, src *uint16, n int)

// bf16Reachable says whether the bf16 kernels can be asked to round the
// float32 encoding b: any number, but only NaNs with the quiet bit set and
// low 16 bits zero (see ROUND_BF16 in simd_amd64.s for why), which the
// kernels round without a NaN test; TestKernelsMatchOracleBitForBit checks
// that claim end to end.
func bf16Reachable(b uint32) bool {
	return b&0x7fffffff <= 0x7f800000 || (b&0x00400000 != 0 && b&0xffff == 0)
}

// narrowBF16 undoes narrowBF16AVX2's merged order: dst[i] = bf16(src[i]).
func narrowBF16(dst *uint16, src *float32, n int) {
	merged := make([]uint32, n/2)
	narrowBF16AVX2(&merged[0], src, n)
	out := unsafe.Slice(dst, n)
	for blk := 0; blk < n; blk += 16 {
		for k := 0; k < 8; k++ {
			w := merged[blk/2+k]
			out[blk+k], out[blk+8+k] = uint16(w), uint16(w>>16)
		}
	}
}

// checkNarrow compares the vector narrowings with F32ToBF16 and F32ToF16
// on the float32 encodings bits, which must have a multiple of 16 entries.
func checkNarrow(t *testing.T, bits []uint32) {
	t.Helper()
	src := make([]float32, len(bits))
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
	}
	got := make([]uint16, len(bits))
	for _, c := range []struct {
		name   string
		vector func(*uint16, *float32, int)
		scalar func(float32) uint16
	}{{"bf16", narrowBF16, F32ToBF16}, {"fp16", narrowF16AVX2, F32ToF16}} {
		c.vector(&got[0], &src[0], len(src))
		for i, f := range src {
			if c.name == "bf16" && !bf16Reachable(bits[i]) {
				continue
			}
			if want := c.scalar(f); got[i] != want {
				t.Fatalf("%s narrowing of %#08x: vector %#04x, F32ToX %#04x", c.name, bits[i], got[i], want)
			}
		}
	}
}

// TestVectorNarrowingMatchesScalar covers every sign, exponent and top
// mantissa bits with low-bit patterns around each rounding boundary of
// bf16 (bit 15) and fp16 (bit 12, and deeper in the subnormal range), so
// ties, overflow to infinity, subnormal results and NaN payloads are all
// met (bf16: the NaNs a rotation can produce, bf16Reachable). KVPILOT_EXHAUSTIVE=1 checks all 2^32 encodings instead (~1 min).
func TestVectorNarrowingMatchesScalar(t *testing.T) {
	if !simdSupported {
		t.Skip("this CPU has no AVX2 and F16C: the vector kernels need an x86-64 CPU with both (Haswell or later)")
	}
	if os.Getenv("KVPILOT_EXHAUSTIVE") == "1" {
		exhaustiveNarrow(t)
		return
	}
	lows := []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x4000, 0x0800, 0x0400, 0xc000}
	rng := rand.New(rand.NewPCG(5, 5))
	bits := make([]uint32, 0, 1<<16*(len(lows)+8))
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range lows {
			bits = append(bits, hi<<16|lo)
		}
		for k := 0; k < 8; k++ {
			bits = append(bits, hi<<16|rng.Uint32()&0xffff)
		}
	}
	checkNarrow(t, bits)
}

func exhaustiveNarrow(t *testing.T) {
	const block = 1 << 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed bool
	next := make(chan uint32)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bits := make([]uint32, block)
			for hi := range next {
				for i := range bits {
					bits[i] = hi<<16 | uint32(i)
				}
				src := make([]float32, block)
				for i, b := range bits {
					src[i] = math.Float32frombits(b)
				}
				bf, f16 := make([]uint16, block), make([]uint16, block)
				narrowBF16(&bf[0], &src[0], block)
				narrowF16AVX2(&f16[0], &src[0], block)
				for i, f := range src {
					if (bf16Reachable(bits[i]) && bf[i] != F32ToBF16(f)) || f16[i] != F32ToF16(f) {
						mu.Lock()
						if !failed {
							t.Errorf("%#08x: vector bf16 %#04x fp16 %#04x, scalar %#04x %#04x", bits[i], bf[i], f16[i], F32ToBF16(f), F32ToF16(f))
						}
						failed = true
						mu.Unlock()
						break
					}
				}
			}
		}()
	}
	for hi := uint32(0); hi < 1<<16; hi++ {
		next <- hi
	}
	close(next)
	wg.Wait()
}

// TestVectorWideningF16 checks VCVTPH2PS against F16ToF32 on all 65536
// halves: equal, except that the hardware quiets a signaling NaN, which
// cannot change a rotation's result because the first use of every
// widened value is a multiplication, which quiets it identically.
func TestVectorWideningF16(t *testing.T) {
	if !simdSupported {
		t.Skip("this CPU has no AVX2 and F16C: the vector kernels need an x86-64 CPU with both (Haswell or later)")
	}
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	got := make([]float32, len(src))
	widenF16AVX2(&got[0], &src[0], len(src))
	for i, h := range src {
		want := math.Float32bits(F16ToF32(h))
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			want |= 0x00400000 // quieted NaN
		}
		if math.Float32bits(got[i]) != want {
			t.Fatalf("half %#04x: vector %#08x, want %#08x", h, math.Float32bits(got[i]), want)
		}
	}
}
