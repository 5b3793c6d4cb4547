package rope

import (
	"fmt"
	"math"
)

// Rotary is a validated Config with its inverse frequencies computed once.
// It is immutable and safe for concurrent use.
type Rotary struct {
	cfg  Config
	inv  []float64
	attn float64
}

// New validates c and computes its per-pair inverse frequencies (in
// float64: positions reach 128K and beyond, where float32 angles would be
// off by tenths of a radian).
func New(c Config) (*Rotary, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	half := c.Dim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(c.Base, float64(2*i)/float64(c.Dim))
	}
	c.Scaling.scale(inv, c.Dim, c.Base)
	return &Rotary{cfg: c, inv: inv, attn: c.Scaling.attentionFactor()}, nil
}

// Config returns the config r was built from.
func (r *Rotary) Config() Config { return r.cfg }

// Dim is the rotary dimension (elements per head slice).
func (r *Rotary) Dim() int { return r.cfg.Dim }

// InvFreqs returns a copy of the per-pair inverse frequencies θ_i.
func (r *Rotary) InvFreqs() []float64 { return append([]float64(nil), r.inv...) }

// AttentionFactor is the factor RoPE(k, p) carries (YaRN mscale ratio, else 1).
func (r *Rotary) AttentionFactor() float64 { return r.attn }

// Apply writes RoPE(x, pos) over x in place: each pair rotated by pos·θ_i and
// scaled by the attention factor, all in float64. len(x) must be Dim.
func (r *Rotary) Apply(x []float64, pos int) error {
	if len(x) != r.cfg.Dim {
		return fmt.Errorf("rope apply: slice of %d elements, want dim %d: %w", len(x), r.cfg.Dim, ErrConfig)
	}
	for i, f := range r.inv {
		s, c := math.Sincos(float64(pos) * f)
		a, b := r.cfg.Pair(i)
		xa, xb := x[a], x[b]
		x[a] = r.attn * (xa*c - xb*s)
		x[b] = r.attn * (xa*s + xb*c)
	}
	return nil
}

// Rotate rotates x in place by delta positions with unscaled cos/sin, in
// float64: the exact counterpart of the kernels' fp32 rotation.
func (r *Rotary) Rotate(x []float64, delta int) error {
	if len(x) != r.cfg.Dim {
		return fmt.Errorf("rope rotate: slice of %d elements, want dim %d: %w", len(x), r.cfg.Dim, ErrConfig)
	}
	for i, f := range r.inv {
		s, c := math.Sincos(float64(delta) * f)
		a, b := r.cfg.Pair(i)
		xa, xb := x[a], x[b]
		x[a] = xa*c - xb*s
		x[b] = xa*s + xb*c
	}
	return nil
}

// DeltaTable fills cos[i], sin[i] with cos(Δθ_i), sin(Δθ_i) rounded to
// float32: the one table every kernel uses for a given Δ. The angle is formed
// in float64 so large Δ loses nothing before the rounding. cos and sin need
// Dim/2 elements.
func (r *Rotary) DeltaTable(delta int, cos, sin []float32) error {
	if len(cos) < len(r.inv) || len(sin) < len(r.inv) {
		return fmt.Errorf("rope delta table: cos/sin of %d/%d elements, want %d: %w", len(cos), len(sin), len(r.inv), ErrConfig)
	}
	for i, f := range r.inv {
		s, c := math.Sincos(float64(delta) * f)
		cos[i], sin[i] = float32(c), float32(s)
	}
	return nil
}
