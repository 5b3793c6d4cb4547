package kernels

import "math"

// fp8 KV caches (vLLM's --kv-cache-dtype fp8_e4m3 / fp8_e5m2) store each
// element as x/scale in eight bits, with one scale per layer. A rotation is
// linear, so rotating the stored values is rotating x and scaling after:
// the kernels widen each stored element exactly, rotate in float32 as for
// every other dtype, and narrow back with round to nearest even, never
// touching the scale. Narrowing saturates to the largest finite value (as
// engines quantize: CUDA's __NV_SATFINITE), so a rotated key never becomes
// infinite or NaN; a NaN stays a NaN.
//
// The conversions are integer code that the CUDA kernels (kvkernels.cu)
// repeat line for line, so both give the same bits.

// fp8Format is one 8-bit float format: M mantissa bits, exponent bias B,
// the largest finite encoding (sign clear), and the NaN the narrowing gives.
type fp8Format struct {
	man    uint32
	bias   int32
	maxFin uint8
	nan    uint8
	// ieee: an all-ones exponent is infinity (mantissa 0) or NaN (e5m2);
	// otherwise only S.1111.111 is NaN and there is no infinity (e4m3fn).
	ieee bool
}

var (
	// e4m3fn: 4 exponent bits, bias 7, largest finite 448.
	fmtE4M3 = fp8Format{man: 3, bias: 7, maxFin: 0x7e, nan: 0x7f}
	// e5m2: 5 exponent bits, bias 15, largest finite 57344.
	fmtE5M2 = fp8Format{man: 2, bias: 15, maxFin: 0x7b, nan: 0x7f, ieee: true}
)

// e4m3Wide and e5m2Wide hold every encoding's float32 value.
var e4m3Wide, e5m2Wide = fp8Table(fmtE4M3), fp8Table(fmtE5M2)

func fp8Table(f fp8Format) *[256]float32 {
	var t [256]float32
	for i := range t {
		t[i] = f.widen(uint8(i))
	}
	return &t
}

// E4M3ToF32 widens an fp8 e4m3fn value exactly.
func E4M3ToF32(b uint8) float32 { return e4m3Wide[b] }

// F32ToE4M3 narrows to fp8 e4m3fn: nearest, ties to even, saturating.
func F32ToE4M3(f float32) uint8 { return fmtE4M3.narrow(f) }

// E5M2ToF32 widens an fp8 e5m2 value exactly.
func E5M2ToF32(b uint8) float32 { return e5m2Wide[b] }

// F32ToE5M2 narrows to fp8 e5m2: nearest, ties to even, saturating.
func F32ToE5M2(f float32) uint8 { return fmtE5M2.narrow(f) }

// widen decodes one encoding.
func (f fp8Format) widen(b uint8) float32 {
	sign := uint32(b&0x80) << 24
	expBits := 7 - f.man
	e := uint32(b>>f.man) & (1<<expBits - 1)
	m := uint32(b) & (1<<f.man - 1)
	top := uint32(1)<<expBits - 1
	switch {
	case f.ieee && e == top && m == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case f.ieee && e == top, !f.ieee && e == top && m == 1<<f.man-1:
		return math.Float32frombits(sign | 0x7fc00000)
	case e == 0: // subnormal: m·2^(1-B-M), exact in float32
		v := float32(m) * float32(math.Ldexp(1, int(1-f.bias-int32(f.man))))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | uint32(int32(e)-f.bias+127)<<23 | m<<(23-f.man))
}

// narrow encodes f, rounding to nearest even and saturating to maxFin.
func (f fp8Format) narrow(x float32) uint8 {
	b := math.Float32bits(x)
	sign := uint8(b>>24) & 0x80
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | f.nan
		}
		return sign | f.maxFin // infinity saturates too
	}
	e := exp - 127 + f.bias
	if e <= 0 {
		// A subnormal of the format (or zero): units of 2^(1-B-M).
		if e < -int32(f.man) {
			return sign // below half the smallest subnormal
		}
		m := man | 0x800000
		shift := uint32(24 - int32(f.man) - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++ // may carry into the smallest normal: still the right encoding
		}
		return sign | uint8(q)
	}
	if e > int32(f.maxFin>>f.man) {
		return sign | f.maxFin
	}
	shift := 23 - f.man
	q := uint32(e)<<f.man | man>>shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	if q > uint32(f.maxFin) {
		return sign | f.maxFin
	}
	return sign | uint8(q)
}

// Half-split and interleaved rotations of fp8 rows, as the other dtypes'
// (cpu_rotate.go), through the format's table and narrowing.

func rotFP8Half(v []uint8, cos, sin []float32, from int, wide *[256]float32, f fp8Format) {
	h := len(cos)
	lo, hi, sin := v[:h], v[h:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := wide[lo[i]], wide[hi[i]]
		lo[i] = f.narrow(float32(x*c) - float32(y*s))
		hi[i] = f.narrow(float32(x*s) - float32(y*-c))
	}
}

func rotFP8Inter(v []uint8, cos, sin []float32, from int, wide *[256]float32, f fp8Format) {
	h := len(cos)
	v, sin = v[:2*h], sin[:h]
	for i := from; i < h; i++ {
		c, s := cos[i], sin[i]
		x, y := wide[v[2*i]], wide[v[2*i+1]]
		v[2*i] = f.narrow(float32(x*c) - float32(y*s))
		v[2*i+1] = f.narrow(float32(x*s) - float32(y*-c))
	}
}
