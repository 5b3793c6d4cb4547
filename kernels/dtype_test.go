package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x is not a NaN", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
}

func TestBF16RoundTripExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if g := F32ToBF16(f); !math.IsNaN(float64(BF16ToF32(g))) {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := F32ToBF16(f); g != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
}

// TestRoundNearestEven checks both narrowings against a float64 reference:
// the result is the nearest representable value, ties going to the even
// encoding, for random values and for exact midpoints.
func TestRoundNearestEven(t *testing.T) {
	type conv struct {
		name   string
		narrow func(float32) uint16
		widen  func(uint16) float32
	}
	for _, c := range []conv{{"fp16", F32ToF16, F16ToF32}, {"bf16", F32ToBF16, BF16ToF32}} {
		check := func(x float32) {
			h := c.narrow(x)
			got := float64(c.widen(h))
			if math.IsInf(got, 0) {
				return // overflow; checked below
			}
			// Neighbours of the chosen encoding (same sign, magnitude ±1).
			for _, n := range []uint16{h - 1, h + 1} {
				if n&0x7fff == 0x7fff || (h&0x7fff == 0 && n == h-1) {
					continue
				}
				alt := float64(c.widen(n))
				if math.IsNaN(alt) || math.IsInf(alt, 0) {
					continue
				}
				dg, da := math.Abs(got-float64(x)), math.Abs(alt-float64(x))
				if da < dg || (da == dg && h&1 == 1) {
					t.Fatalf("%s(%v) = %v (%#04x), but %v (%#04x) is nearer or the even tie", c.name, x, got, h, alt, n)
				}
			}
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < 200000; i++ {
			x := float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-30)))
			check(x)
		}
		// Midpoints between consecutive values, including subnormals.
		for h := uint16(0); h < 0x7bff; h += 37 {
			a, b := float64(c.widen(h)), float64(c.widen(h+1))
			if math.IsInf(b, 0) || math.IsNaN(b) {
				break
			}
			check(float32((a + b) / 2))
		}
	}
	if F32ToF16(70000) != 0x7c00 || F32ToF16(-70000) != 0xfc00 {
		t.Fatal("fp16 overflow must give infinity")
	}
	if F32ToF16(1e-9) != 0 {
		t.Fatal("fp16 underflow must give zero")
	}
}

// TestF16ToF32MatchesDecode: the inlinable widening equals the plain
// field-by-field decode (oracleF16ToF32) on all 65536 halves, bit for bit.
func TestF16ToF32MatchesDecode(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got, want := math.Float32bits(F16ToF32(uint16(h))), math.Float32bits(oracleF16ToF32(uint16(h))); got != want {
			t.Fatalf("%#04x: %#08x, want %#08x", h, got, want)
		}
	}
}
