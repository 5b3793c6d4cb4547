package rope

import (
	"fmt"
	"math"
)

// ScalingType is rope_scaling.rope_type.
type ScalingType uint8

const (
	ScalingNone ScalingType = iota
	// ScalingLinear divides every frequency by Factor (position interpolation).
	ScalingLinear
	// ScalingLlama3 keeps high frequencies, divides low ones by Factor and
	// blends in between (Llama 3.1+).
	ScalingLlama3
	// ScalingYaRN blends interpolated and extrapolated frequencies over a
	// ramp set by BetaFast/BetaSlow, and scales attention by an mscale.
	ScalingYaRN
)

func (t ScalingType) String() string {
	switch t {
	case ScalingNone:
		return "none"
	case ScalingLinear:
		return "linear"
	case ScalingLlama3:
		return "llama3"
	case ScalingYaRN:
		return "yarn"
	}
	return fmt.Sprintf("scaling(%d)", uint8(t))
}

// ParseScalingType accepts the rope_type names of model configs; "" and
// "default" mean none.
func ParseScalingType(s string) (ScalingType, error) {
	switch s {
	case "", "none", "default":
		return ScalingNone, nil
	case "linear":
		return ScalingLinear, nil
	case "llama3":
		return ScalingLlama3, nil
	case "yarn", "deepseek_yarn":
		return ScalingYaRN, nil
	}
	return 0, fmt.Errorf("rope scaling %q: want none|linear|llama3|yarn: %w", s, ErrConfig)
}

// Scaling is rope_scaling. Fields not used by Type must be zero.
type Scaling struct {
	Type   ScalingType
	Factor float64
	// OriginalMaxPosition is original_max_position_embeddings (llama3, yarn).
	OriginalMaxPosition int
	// LowFreqFactor and HighFreqFactor: llama3 only.
	LowFreqFactor, HighFreqFactor float64
	// BetaFast and BetaSlow bound YaRN's ramp in rotations; zero means the
	// usual 32 and 1.
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim (DeepSeek's names) set YaRN's attention factor
	// get_mscale(Factor, MScale) / get_mscale(Factor, MScaleAllDim) when both
	// are set, else get_mscale(Factor, 1).
	MScale, MScaleAllDim float64
	// AttentionFactor, when non-zero, overrides the derived YaRN factor.
	AttentionFactor float64
	// NoTruncate keeps YaRN's correction range fractional (truncate=false).
	NoTruncate bool
}

func (s Scaling) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("rope scaling %s: "+format+": %w", append([]any{s.Type}, append(a, ErrConfig)...)...)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for _, v := range []float64{s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.BetaFast, s.BetaSlow, s.MScale, s.MScaleAllDim, s.AttentionFactor} {
		if !finite(v) || v < 0 {
			return bad("parameters must be finite and >= 0, got %v", v)
		}
	}
	if s.OriginalMaxPosition < 0 {
		return bad("original_max_position %d < 0", s.OriginalMaxPosition)
	}
	llamaSet := s.LowFreqFactor != 0 || s.HighFreqFactor != 0
	yarnSet := s.BetaFast != 0 || s.BetaSlow != 0 || s.MScale != 0 || s.MScaleAllDim != 0 || s.AttentionFactor != 0 || s.NoTruncate
	switch s.Type {
	case ScalingNone:
		if s.Factor != 0 || s.OriginalMaxPosition != 0 || llamaSet || yarnSet {
			return bad("has parameters but no scaling type")
		}
	case ScalingLinear:
		if !(s.Factor > 0) {
			return bad("factor %v must be > 0", s.Factor)
		}
		if s.OriginalMaxPosition != 0 || llamaSet || yarnSet {
			return bad("only factor applies")
		}
	case ScalingLlama3:
		if !(s.Factor > 0) || s.OriginalMaxPosition <= 0 {
			return bad("needs factor > 0 and original_max_position > 0, got %v and %d", s.Factor, s.OriginalMaxPosition)
		}
		if !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) {
			return bad("needs 0 < low_freq_factor < high_freq_factor, got %v and %v", s.LowFreqFactor, s.HighFreqFactor)
		}
		if yarnSet {
			return bad("yarn parameters set")
		}
	case ScalingYaRN:
		if !(s.Factor > 0) || s.OriginalMaxPosition <= 0 {
			return bad("needs factor > 0 and original_max_position > 0, got %v and %d", s.Factor, s.OriginalMaxPosition)
		}
		fast, slow := s.betas()
		if !(fast > slow) || !(slow > 0) {
			return bad("needs beta_fast > beta_slow > 0, got %v and %v", fast, slow)
		}
		if llamaSet {
			return bad("llama3 parameters set")
		}
	default:
		return bad("unknown type")
	}
	return nil
}

func (s Scaling) betas() (fast, slow float64) {
	fast, slow = s.BetaFast, s.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	return fast, slow
}

// yarnMScale is YaRN's get_mscale: 0.1·m·ln(scale)+1 for scale > 1.
func yarnMScale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// attentionFactor is the factor RoPE(k, p) carries for this scaling (YaRN's
// mscale ratio; 1 for every other type).
func (s Scaling) attentionFactor() float64 {
	if s.Type != ScalingYaRN {
		return 1
	}
	if s.AttentionFactor != 0 {
		return s.AttentionFactor
	}
	if s.MScale != 0 && s.MScaleAllDim != 0 {
		return yarnMScale(s.Factor, s.MScale) / yarnMScale(s.Factor, s.MScaleAllDim)
	}
	return yarnMScale(s.Factor, 1)
}

// scale rewrites the unscaled inverse frequencies inv (len dim/2) in place.
func (s Scaling) scale(inv []float64, dim int, base float64) {
	switch s.Type {
	case ScalingLinear:
		for i := range inv {
			inv[i] /= s.Factor
		}
	case ScalingLlama3:
		orig := float64(s.OriginalMaxPosition)
		lowWavelen := orig / s.LowFreqFactor
		highWavelen := orig / s.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
				// high frequency: unchanged
			case wavelen > lowWavelen:
				inv[i] = f / s.Factor
			default:
				smooth := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[i] = (1-smooth)*f/s.Factor + smooth*f
			}
		}
	case ScalingYaRN:
		fast, slow := s.betas()
		orig := float64(s.OriginalMaxPosition)
		correction := func(rotations float64) float64 {
			return float64(dim) * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(base))
		}
		low, high := correction(fast), correction(slow)
		if !s.NoTruncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
		if low == high {
			high += 0.001 // avoid a zero-width ramp
		}
		for i, f := range inv {
			ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
			extrapolate := 1 - ramp
			inv[i] = (f/s.Factor)*(1-extrapolate) + f*extrapolate
		}
	}
}
