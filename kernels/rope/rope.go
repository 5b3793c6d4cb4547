// Package rope holds kvpilot's model of rotary position embeddings: a
// model's RoPE config (base θ, rotary dim, pairing, frequency scaling), the
// per-pair inverse frequencies it implies, the Δ-rotation tables the kernels
// use, and a direct float64 RoPE (Apply) that serves as the test oracle and as
// the reference engine's key writer.
//
// The rotation rule: moving a cached key from position p to p+Δ
// multiplies each pair by R(Δθ) with unscaled cos(Δθ) and sin(Δθ). Any
// attention factor (YaRN's mscale) scales RoPE(k, p) once, at prefill; it is
// never applied to Δ, or the key would grow at every shift.
package rope

import (
	"errors"
	"fmt"
	"math"
)

// ErrConfig is wrapped by every validation failure of a Config.
var ErrConfig = errors.New("invalid RoPE config")

// Pairing says which elements of a head's rotary slice form a rotated pair.
type Pairing uint8

const (
	// Interleaved pairs (2i, 2i+1): GPT-J, DeepSeek MLA's k_pe.
	Interleaved Pairing = iota + 1
	// HalfSplit pairs (i, i+dim/2): GPT-NeoX, Llama, Qwen.
	HalfSplit
)

func (p Pairing) String() string {
	switch p {
	case Interleaved:
		return "interleaved"
	case HalfSplit:
		return "half-split"
	}
	return fmt.Sprintf("pairing(%d)", uint8(p))
}

// ParsePairing accepts "interleaved" (or "gptj") and "half-split" (or "neox").
func ParsePairing(s string) (Pairing, error) {
	switch s {
	case "interleaved", "gptj", "gpt-j":
		return Interleaved, nil
	case "half-split", "half_split", "neox":
		return HalfSplit, nil
	}
	return 0, fmt.Errorf("pairing %q: want interleaved|gptj or half-split|neox: %w", s, ErrConfig)
}

// Config is a model's RoPE configuration, in the terms of its
// config.json (rope_theta, partial_rotary_factor, rope_scaling).
type Config struct {
	// Base is θ's base (rope_theta), e.g. 10000 or 500000.
	Base float64
	// Dim is the rotary dimension of one head: head_dim times
	// partial_rotary_factor. Even; Dim/2 pairs.
	Dim     int
	Pairing Pairing
	Scaling Scaling
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	if !(c.Base > 1) || math.IsInf(c.Base, 0) {
		return fmt.Errorf("rope base %v must be a finite number > 1: %w", c.Base, ErrConfig)
	}
	if c.Dim <= 0 || c.Dim%2 != 0 || c.Dim > 1<<14 {
		return fmt.Errorf("rope dim %d must be even and in [2, 16384]: %w", c.Dim, ErrConfig)
	}
	if c.Pairing != Interleaved && c.Pairing != HalfSplit {
		return fmt.Errorf("rope pairing %v: want interleaved or half-split: %w", c.Pairing, ErrConfig)
	}
	return c.Scaling.validate()
}

// Pair returns the element indices (within the rotary slice) of pair i.
func (c Config) Pair(i int) (a, b int) {
	if c.Pairing == Interleaved {
		return 2 * i, 2*i + 1
	}
	return i, i + c.Dim/2
}
