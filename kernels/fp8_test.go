package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

var fp8Formats = []struct {
	name   string
	f      fp8Format
	widen  func(uint8) float32
	narrow func(float32) uint8
	max    float64
}{
	{"e4m3", fmtE4M3, E4M3ToF32, F32ToE4M3, 448},
	{"e5m2", fmtE5M2, E5M2ToF32, F32ToE5M2, 57344},
}

// Every finite encoding widens and narrows back to itself; NaNs stay NaNs;
// e5m2's infinities saturate (an engine's quantization never writes one).
func TestFP8RoundTripExhaustive(t *testing.T) {
	for _, tc := range fp8Formats {
		for b := 0; b < 256; b++ {
			f := tc.widen(uint8(b))
			g := tc.narrow(f)
			switch {
			case math.IsNaN(float64(f)):
				if !math.IsNaN(float64(tc.widen(g))) {
					t.Fatalf("%s: NaN %#02x -> %#02x", tc.name, b, g)
				}
			case math.IsInf(float64(f), 0):
				if math.Abs(float64(tc.widen(g))) != tc.max {
					t.Fatalf("%s: infinity %#02x -> %#02x, want the largest finite", tc.name, b, g)
				}
			case g != uint8(b):
				t.Fatalf("%s: %#02x -> %v -> %#02x", tc.name, b, f, g)
			}
		}
		if got := float64(tc.widen(tc.f.maxFin)); got != tc.max {
			t.Fatalf("%s: largest finite %v, want %v", tc.name, got, tc.max)
		}
	}
}

// Narrowing is the nearest finite value, ties to the even encoding, and
// saturates beyond the largest finite: checked against a search over every
// encoding, on values around each encoding and at random.
func TestFP8NarrowIsNearestEvenSaturating(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, tc := range fp8Formats {
		var xs []float32
		for b := 0; b < 256; b++ {
			v := tc.widen(uint8(b))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				continue
			}
			xs = append(xs, v, math.Nextafter32(v, float32(math.Inf(1))), math.Nextafter32(v, float32(math.Inf(-1))))
			if b+1 < 256 { // the midpoint to the next encoding: a tie
				if w := float64(tc.widen(uint8(b + 1))); !math.IsNaN(w) && !math.IsInf(w, 0) {
					xs = append(xs, float32((float64(v)+w)/2))
				}
			}
		}
		for range 20000 {
			xs = append(xs, float32(r.NormFloat64()*math.Pow(2, float64(r.IntN(40)-24))))
		}
		xs = append(xs, float32(tc.max*1.5), float32(-tc.max*3), 1e-30, -1e-30)
		for _, x := range xs {
			want := nearestFP8(tc.widen, x, tc.max)
			if got := tc.narrow(x); tc.widen(got) != tc.widen(want) || (x != 0 && got&0x80 != want&0x80) {
				t.Fatalf("%s: narrow(%g) = %#02x (%g), want %#02x (%g)", tc.name, x, got, tc.widen(got), want, tc.widen(want))
			}
		}
	}
}

// nearestFP8 is the reference narrowing: the finite encoding nearest x,
// the even one on a tie, the largest finite beyond it.
func nearestFP8(widen func(uint8) float32, x float32, maxFin float64) uint8 {
	best, bestD := uint8(0), math.Inf(1)
	sign := uint8(0)
	if math.Signbit(float64(x)) {
		sign = 0x80
	}
	ax := math.Abs(float64(x))
	if ax > maxFin {
		ax = maxFin
	}
	for b := 0; b < 128; b++ {
		v := float64(widen(uint8(b)))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		d := math.Abs(v - ax)
		if d < bestD || (d == bestD && b&1 == 0) {
			best, bestD = uint8(b), d
		}
	}
	return sign | best
}

// An fp8 rotation is the float32 rotation of the widened values, narrowed:
// within half a step of the format of the exact rotation, and reversed by
// the opposite rotation to within a step.
func TestFP8RotationMatchesTheWidenedRotation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range fp8Formats {
		const h = 32
		cos, sin := make([]float32, h), make([]float32, h)
		for i := range cos {
			a := r.Float64() * 2 * math.Pi
			cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		v := make([]uint8, 2*h)
		for i := range v {
			v[i] = tc.narrow(float32(r.NormFloat64() * 4))
		}
		orig := append([]uint8(nil), v...)
		rotFP8Half(v, cos, sin, 0, fp8Table(tc.f), tc.f)
		for i := range h {
			x, y := float64(tc.widen(orig[i])), float64(tc.widen(orig[h+i]))
			c, s := float64(cos[i]), float64(sin[i])
			for _, p := range []struct {
				got  uint8
				want float64
			}{{v[i], x*c - y*s}, {v[h+i], x*s + y*c}} {
				if got := float64(tc.widen(p.got)); math.Abs(got-p.want) > fp8Step(p.want, tc.f)/2+1e-6 {
					t.Fatalf("%s pair %d: %g, want %g within half a step", tc.name, i, got, p.want)
				}
			}
		}
	}
}

// fp8Step is the gap between f's encodings around x.
func fp8Step(x float64, f fp8Format) float64 {
	_, e := math.Frexp(math.Abs(x))
	e = max(e-1, int(1-f.bias))
	return math.Ldexp(1, e-int(f.man))
}
