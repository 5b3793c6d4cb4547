package layout

import (
	"fmt"
	"strings"
)

// DType is the storage element type of a KV buffer. Pools only need its
// size: fp8 variants are carried opaquely.
type DType uint8

const (
	DTypeInvalid DType = iota
	FP32
	BF16
	FP16
	FP8E4M3
	FP8E5M2
)

var dtypeNames = [...]string{"invalid", "fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}
var dtypeSizes = [...]int{0, 4, 2, 2, 1, 1}

// Size is the element size in bytes (0 for an invalid dtype).
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d names a known dtype.
func (d DType) Valid() bool { return d > DTypeInvalid && int(d) < len(dtypeNames) }

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType accepts the names engines use: fp32/float32, bf16/bfloat16,
// fp16/float16/half, fp8 (e4m3), fp8_e4m3, fp8_e5m2.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimPrefix(s, "torch.")) {
	case "fp32", "float32", "float":
		return FP32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "half":
		return FP16, nil
	case "fp8", "fp8_e4m3", "float8_e4m3fn", "e4m3":
		return FP8E4M3, nil
	case "fp8_e5m2", "float8_e5m2", "e5m2":
		return FP8E5M2, nil
	}
	return DTypeInvalid, fmt.Errorf("%w: unknown dtype %q: want fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2", ErrInvalid, s)
}

// MarshalText writes the canonical name.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("%w: cannot encode dtype %d", ErrInvalid, uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText accepts any spelling ParseDType does.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// RopeStyle is how the rotated elements of a head pair up.
type RopeStyle uint8

const (
	RopeStyleInvalid RopeStyle = iota
	// Interleaved pairs (2i, 2i+1): GPT-J, DeepSeek MLA.
	Interleaved
	// HalfSplit pairs (i, i+dim/2): NeoX, Llama, Qwen.
	HalfSplit
)

var ropeStyleNames = [...]string{"invalid", "interleaved", "half_split"}

// Valid reports whether s names a known style.
func (s RopeStyle) Valid() bool { return s == Interleaved || s == HalfSplit }

func (s RopeStyle) String() string {
	if int(s) < len(ropeStyleNames) {
		return ropeStyleNames[s]
	}
	return fmt.Sprintf("rope_style(%d)", uint8(s))
}

// ParseRopeStyle accepts interleaved/gptj and half_split/neox.
func ParseRopeStyle(s string) (RopeStyle, error) {
	switch strings.ToLower(s) {
	case "interleaved", "gptj", "gpt-j":
		return Interleaved, nil
	case "half_split", "half", "neox", "rotate_half":
		return HalfSplit, nil
	}
	return RopeStyleInvalid, fmt.Errorf("%w: unknown rope style %q: want interleaved or half_split", ErrInvalid, s)
}

// MarshalText writes the canonical name.
func (s RopeStyle) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: cannot encode rope style %d", ErrInvalid, uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText accepts any spelling ParseRopeStyle does.
func (s *RopeStyle) UnmarshalText(b []byte) error {
	v, err := ParseRopeStyle(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
