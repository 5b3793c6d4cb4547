package config

import (
	"fmt"
	"math"
	"sort"
)

// Splice configures what an amortize splice recomputes of the tokens it
// keeps. A kept token's K/V are those its first prefill computed while it
// attended to the text the splice removes: the cache then differs from a
// re-prefill of the edited sequence, and so do the model's next tokens
// (`kvpilot bench splice-quality` measures by how much). Recomputing some
// kept tokens with the edited context closes part of that gap at the cost
// of prefilling them.
type Splice struct {
	// Recompute is what every splice recomputes.
	Recompute Recompute `koanf:"recompute"`
	// MaxKL is the quality guard's budget: for each splice the engine
	// estimates the mean KL divergence per token against a re-prefill and
	// recomputes what it takes to stay within it, all of the kept tokens
	// when nothing less will. 0 turns the guard off.
	MaxKL float64 `koanf:"max_kl"`
	// Tenants overrides these settings per tenant; a key left out keeps
	// the host's value.
	Tenants map[string]SpliceTenant `koanf:"tenants"`
}

// Recompute names the kept tokens a splice prefills again.
type Recompute struct {
	// First recomputes the first First tokens after each edit.
	First int `koanf:"first"`
	// Share recomputes that fraction (0..1) of the kept tokens after the
	// first edit, those the engine's staleness signal ranks first.
	Share float64 `koanf:"share"`
}

// SpliceTenant is one tenant's override of splice.
type SpliceTenant struct {
	Recompute RecomputeOverride `koanf:"recompute"`
	MaxKL     *float64          `koanf:"max_kl"`
}

// RecomputeOverride is splice.recompute with each key optional.
type RecomputeOverride struct {
	First *int     `koanf:"first"`
	Share *float64 `koanf:"share"`
}

// SpliceRule is what splices of one tenant recompute.
type SpliceRule struct {
	First int
	Share float64
	MaxKL float64
}

// Any reports whether the rule recomputes anything.
func (r SpliceRule) Any() bool { return r.First > 0 || r.Share > 0 || r.MaxKL > 0 }

// Ranked reports whether the rule needs the engine's own choice (a share
// or the guard), which only an engine that recomputes can make.
func (r SpliceRule) Ranked() bool { return r.Share > 0 || r.MaxKL > 0 }

// For returns tenant's rule: the host's, with the tenant's overrides.
func (s Splice) For(tenant string) SpliceRule {
	r := SpliceRule{First: s.Recompute.First, Share: s.Recompute.Share, MaxKL: s.MaxKL}
	t, ok := s.Tenants[tenant]
	if !ok {
		return r
	}
	if t.Recompute.First != nil {
		r.First = *t.Recompute.First
	}
	if t.Recompute.Share != nil {
		r.Share = *t.Recompute.Share
	}
	if t.MaxKL != nil {
		r.MaxKL = *t.MaxKL
	}
	return r
}

// Rules lists the host's rule and every tenant's (the host's first), for
// checks that must hold for all of them.
func (s Splice) Rules() []SpliceRule {
	out := []SpliceRule{s.For("")}
	names := make([]string, 0, len(s.Tenants))
	for t := range s.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		out = append(out, s.For(t))
	}
	return out
}

// maxRecomputeFirst bounds splice.recompute.first (a position count).
const maxRecomputeFirst = 1 << 20

func (c Config) validateSplice(bad func(key, format string, args ...any)) {
	check := func(key string, r SpliceRule) {
		if r.First < 0 || r.First > maxRecomputeFirst {
			bad(key+"recompute.first", "%d is not in 0..%d", r.First, maxRecomputeFirst)
		}
		if math.IsNaN(r.Share) || r.Share < 0 || r.Share > 1 {
			bad(key+"recompute.share", "%v is not a fraction in [0, 1]", r.Share)
		}
		if math.IsNaN(r.MaxKL) || math.IsInf(r.MaxKL, 0) || r.MaxKL < 0 {
			bad(key+"max_kl", "%v is not a budget >= 0 (nats per token; 0 is off)", r.MaxKL)
		}
	}
	check("splice.", c.Splice.For(""))
	names := make([]string, 0, len(c.Splice.Tenants))
	for t := range c.Splice.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		check(fmt.Sprintf("splice.tenants.%s.", t), c.Splice.For(t))
	}
}
