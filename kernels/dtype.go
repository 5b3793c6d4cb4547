package kernels

import (
	"fmt"
	"math"
)

// DType is the storage type of KV elements.
type DType uint8

const (
	F32 DType = iota + 1
	BF16
	F16
	// E4M3 and E5M2 are fp8 (fp8.go): stored scaled, rotated as stored.
	E4M3
	E5M2
)

func (d DType) String() string {
	switch d {
	case F32:
		return "fp32"
	case BF16:
		return "bf16"
	case F16:
		return "fp16"
	case E4M3:
		return "fp8_e4m3"
	case E5M2:
		return "fp8_e5m2"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes (0 for an unknown DType).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	case E4M3, E5M2:
		return 1
	}
	return 0
}

// ParseDType accepts fp32|float32, bf16|bfloat16, fp16|float16|half,
// fp8_e4m3 and fp8_e5m2.
func ParseDType(s string) (DType, error) {
	switch s {
	case "fp32", "float32", "f32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "f16", "half":
		return F16, nil
	case "fp8_e4m3", "fp8", "e4m3":
		return E4M3, nil
	case "fp8_e5m2", "e5m2":
		return E5M2, nil
	}
	return 0, fmt.Errorf("dtype %q: want fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2: %w", s, ErrLayout)
}

// BF16ToF32 widens a bfloat16 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE half exactly. A signaling NaN stays signaling
// (only arithmetic quiets it).
func F16ToF32(h uint16) float32 { return f16Widen(h) }

// f16Widen is F16ToF32 for the hot loops: inlinable, with only zeros and
// subnormals (rare in keys) taking the call.
func f16Widen(h uint16) float32 {
	e := uint32(h>>10) & 0x1f
	bits := uint32(h&0x8000)<<16 | uint32(h&0x3ff)<<13
	switch e {
	case 0x1f: // inf, NaN
		bits |= 0x7f800000
	case 0:
		return f16Small(h)
	default:
		bits |= (e + 112) << 23
	}
	return math.Float32frombits(bits)
}

// f16Small widens a zero or subnormal half: man·2^-24, exact in float32.
func f16Small(h uint16) float32 {
	v := float32(h&0x3ff) * (1.0 / (1 << 24))
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// F32ToF16 rounds to the nearest IEEE half, ties to even, with subnormals,
// overflow to infinity, and NaN kept a quiet NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++ // may carry into the smallest normal: still the right encoding
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(q)
}
