package rope

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// Model configs the tests share.
var (
	llama3 = Config{Base: 500000, Dim: 128, Pairing: HalfSplit, Scaling: Scaling{
		Type: ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPosition: 8192}}
	deepseekYaRN = Config{Base: 10000, Dim: 64, Pairing: Interleaved, Scaling: Scaling{
		Type: ScalingYaRN, Factor: 40, OriginalMaxPosition: 4096, BetaFast: 32, BetaSlow: 1, MScale: 0.707, MScaleAllDim: 0.707}}
)

func TestValidateRejects(t *testing.T) {
	good := Config{Base: 10000, Dim: 64, Pairing: HalfSplit}
	cases := map[string]func(c *Config){
		"base 1":             func(c *Config) { c.Base = 1 },
		"base NaN":           func(c *Config) { c.Base = math.NaN() },
		"base inf":           func(c *Config) { c.Base = math.Inf(1) },
		"odd dim":            func(c *Config) { c.Dim = 63 },
		"zero dim":           func(c *Config) { c.Dim = 0 },
		"no pairing":         func(c *Config) { c.Pairing = 0 },
		"none with factor":   func(c *Config) { c.Scaling.Factor = 2 },
		"linear zero factor": func(c *Config) { c.Scaling = Scaling{Type: ScalingLinear} },
		"linear with betas":  func(c *Config) { c.Scaling = Scaling{Type: ScalingLinear, Factor: 2, BetaFast: 3} },
		"llama3 no orig": func(c *Config) {
			c.Scaling = Scaling{Type: ScalingLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4}
		},
		"llama3 low>=high": func(c *Config) {
			c.Scaling = Scaling{Type: ScalingLlama3, Factor: 8, LowFreqFactor: 4, HighFreqFactor: 4, OriginalMaxPosition: 8192}
		},
		"yarn beta order": func(c *Config) {
			c.Scaling = Scaling{Type: ScalingYaRN, Factor: 4, OriginalMaxPosition: 4096, BetaFast: 1, BetaSlow: 32}
		},
		"yarn negative mscale": func(c *Config) {
			c.Scaling = Scaling{Type: ScalingYaRN, Factor: 4, OriginalMaxPosition: 4096, MScale: -1}
		},
		"yarn llama fields": func(c *Config) {
			c.Scaling = Scaling{Type: ScalingYaRN, Factor: 4, OriginalMaxPosition: 4096, LowFreqFactor: 1}
		},
		"unknown type": func(c *Config) { c.Scaling = Scaling{Type: 9, Factor: 2} },
	}
	for name, mutate := range cases {
		c := good
		mutate(&c)
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
	for _, c := range []Config{good, llama3, deepseekYaRN} {
		if _, err := New(c); err != nil {
			t.Errorf("valid config %+v rejected: %v", c, err)
		}
	}
}

func TestParse(t *testing.T) {
	if p, err := ParsePairing("neox"); err != nil || p != HalfSplit {
		t.Fatalf("neox: %v %v", p, err)
	}
	if p, err := ParsePairing("gptj"); err != nil || p != Interleaved {
		t.Fatalf("gptj: %v %v", p, err)
	}
	if _, err := ParsePairing("diagonal"); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad pairing: %v", err)
	}
	if s, err := ParseScalingType("llama3"); err != nil || s != ScalingLlama3 {
		t.Fatalf("llama3: %v %v", s, err)
	}
	if _, err := ParseScalingType("dynamic"); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad scaling: %v", err)
	}
}

func TestInvFreqs(t *testing.T) {
	plain, _ := New(Config{Base: 10000, Dim: 64, Pairing: HalfSplit})
	inv := plain.InvFreqs()
	if inv[0] != 1 || math.Abs(inv[16]-0.01) > 1e-15 {
		t.Fatalf("plain: inv[0]=%v inv[16]=%v, want 1 and 10000^(-1/2)", inv[0], inv[16])
	}
	lin, _ := New(Config{Base: 10000, Dim: 64, Pairing: HalfSplit, Scaling: Scaling{Type: ScalingLinear, Factor: 4}})
	for i, f := range lin.InvFreqs() {
		if math.Abs(f-inv[i]/4) > 1e-18 {
			t.Fatalf("linear: inv[%d]=%v want %v", i, f, inv[i]/4)
		}
	}

	// Llama 3.1: wavelengths under 8192/4 keep their frequency, those over
	// 8192/1 are divided by 8, those between are blended.
	l3, _ := New(llama3)
	base, _ := New(Config{Base: 500000, Dim: 128, Pairing: HalfSplit})
	var kept, divided, blended int
	for i, f := range l3.InvFreqs() {
		orig := base.InvFreqs()[i]
		wavelen := 2 * math.Pi / orig
		switch {
		case wavelen < 2048:
			kept++
			if f != orig {
				t.Fatalf("llama3 pair %d (wavelen %.0f) changed", i, wavelen)
			}
		case wavelen > 8192:
			divided++
			if math.Abs(f-orig/8) > 1e-18 {
				t.Fatalf("llama3 pair %d: %v want %v", i, f, orig/8)
			}
		default:
			blended++
			if !(f < orig && f > orig/8) {
				t.Fatalf("llama3 pair %d: %v not between %v and %v", i, f, orig/8, orig)
			}
		}
	}
	if kept == 0 || divided == 0 || blended == 0 {
		t.Fatalf("llama3 config exercised kept=%d divided=%d blended=%d", kept, divided, blended)
	}

	// DeepSeek YaRN: correction range floor(10.47)=10 .. ceil(22.5)=23 for
	// dim 64, base 1e4, 4096 original positions, betas 32/1.
	ys, _ := New(deepseekYaRN)
	yb, _ := New(Config{Base: 10000, Dim: 64, Pairing: Interleaved})
	for i, f := range ys.InvFreqs() {
		orig := yb.InvFreqs()[i]
		switch {
		case i <= 10:
			if f != orig {
				t.Fatalf("yarn pair %d should extrapolate: %v vs %v", i, f, orig)
			}
		case i >= 23:
			if math.Abs(f-orig/40) > 1e-18 {
				t.Fatalf("yarn pair %d should interpolate: %v vs %v", i, f, orig/40)
			}
		default:
			if !(f < orig && f > orig/40) {
				t.Fatalf("yarn pair %d in the ramp: %v not in (%v, %v)", i, f, orig/40, orig)
			}
		}
	}
	if a := ys.AttentionFactor(); a != 1 {
		t.Fatalf("deepseek mscale == mscale_all_dim: attention factor %v, want 1", a)
	}
	noAll := deepseekYaRN
	noAll.Scaling.MScaleAllDim = 0
	yn, _ := New(noAll)
	if want := 0.1*math.Log(40) + 1; math.Abs(yn.AttentionFactor()-want) > 1e-15 {
		t.Fatalf("yarn attention factor %v, want %v", yn.AttentionFactor(), want)
	}
}

// TestApplyClosure checks RoPE's closure in float64: Rotate(Apply(k, p), Δ)
// = Apply(k, p+Δ), with the attention factor carried once, never by Δ.
func TestApplyClosure(t *testing.T) {
	yarnScaled := deepseekYaRN
	yarnScaled.Scaling.MScaleAllDim = 0 // attention factor 1.369
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []Config{llama3, deepseekYaRN, yarnScaled, {Base: 10000, Dim: 32, Pairing: HalfSplit}} {
		r, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		for trial := 0; trial < 50; trial++ {
			k := make([]float64, c.Dim)
			for i := range k {
				k[i] = rng.NormFloat64()
			}
			p := rng.IntN(128 << 10)
			d := rng.IntN(128<<10) - p
			got := append([]float64(nil), k...)
			want := append([]float64(nil), k...)
			_ = r.Apply(got, p)
			_ = r.Rotate(got, d)
			_ = r.Apply(want, p+d)
			for i := range got {
				if math.Abs(got[i]-want[i]) > 1e-9 {
					t.Fatalf("%+v p=%d Δ=%d elem %d: %v vs %v", c.Scaling, p, d, i, got[i], want[i])
				}
			}
		}
	}
	r, _ := New(llama3)
	if err := r.Apply(make([]float64, 3), 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("short slice: %v", err)
	}
	if err := r.DeltaTable(1, make([]float32, 2), make([]float32, 64)); !errors.Is(err, ErrConfig) {
		t.Fatalf("short table: %v", err)
	}
}
