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
	// when nothing less will. Unset: DefaultMaxKL on an engine that runs
	// the guard. 0 turns the guard off.
	MaxKL *float64 `koanf:"max_kl"`
	// Tenants overrides these settings per tenant; a key left out keeps
	// the host's value.
	Tenants map[string]SpliceTenant `koanf:"tenants"`
}

// Recompute names the kept tokens a splice prefills again. A key left
// unset takes its default (Splice.For).
type Recompute struct {
	// First recomputes the first First tokens after each edit. Unset:
	// DefaultRecomputeFirst on an engine that recomputes only a fixed
	// prefix (vLLM, through the front door). 0 turns it off.
	First *int `koanf:"first"`
	// Share recomputes that fraction (0..1) of the kept tokens after the
	// first edit, those the engine's staleness signal ranks first.
	Share *float64 `koanf:"share"`
}

// SpliceTenant is one tenant's override of splice.
type SpliceTenant struct {
	Recompute Recompute `koanf:"recompute"`
	MaxKL     *float64  `koanf:"max_kl"`
}

// The measured settings a splice recomputes with unless a configuration
// says otherwise (README, "What a splice costs the answers"; a test holds
// these to the settings the README reports as measured):
//
//   - DefaultMaxKL: the guard's budget; on SmolLM2 over the benchmark's 30
//     real edits, 0.0039 mean KL per token and 98.8% top-1 against a
//     re-prefill, recomputing 19.9% of the edited region
//     (`kvpilot bench splice-quality`);
//   - DefaultRecomputeFirst: through vLLM, where only a fixed prefix can
//     be recomputed (`--fresh answer`), 0.0039 and 98.6% for 13.1%.
const (
	DefaultMaxKL          = 0.005
	DefaultRecomputeFirst = 64
)

// Recomputes is what an engine can recompute of a splice's kept tokens,
// which decides the defaults it gets.
type Recomputes uint8

const (
	// RecomputesNothing: no recompute at all (a connector-mode engine
	// without the front door, an arena engine that did not register
	// recompute). Splices stay uncorrected.
	RecomputesNothing Recomputes = iota
	// RecomputesFirst: the first tokens after an edit, prefilled again by
	// the front door's prefill request (vLLM behind gateway.listen).
	RecomputesFirst
	// RecomputesRanked: any kept tokens, ranked by the engine's staleness
	// signal (kvpilot.torchengine in arena mode): the quality guard.
	RecomputesRanked
)

func (r Recomputes) String() string {
	switch r {
	case RecomputesFirst:
		return "the first tokens after an edit (splice.recompute.first, through the front door)"
	case RecomputesRanked:
		return "kept tokens it ranks (the quality guard, splice.max_kl)"
	}
	return "nothing"
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

// For returns tenant's rule on an engine that can recompute can: the
// host's settings with the tenant's overrides, and for what neither sets,
// the default that engine can honour (the guard where it ranks, the first
// tokens where only they can be recomputed, nothing else).
func (s Splice) For(tenant string, can Recomputes) SpliceRule {
	first, share, maxKL := s.Recompute.First, s.Recompute.Share, s.MaxKL
	if t, ok := s.Tenants[tenant]; ok {
		first = orElse(t.Recompute.First, first)
		share = orElse(t.Recompute.Share, share)
		maxKL = orElse(t.MaxKL, maxKL)
	}
	r := SpliceRule{First: valueOr(first, 0), Share: valueOr(share, 0), MaxKL: valueOr(maxKL, 0)}
	switch {
	case can == RecomputesRanked && maxKL == nil:
		r.MaxKL = DefaultMaxKL
	case can == RecomputesFirst && first == nil:
		r.First = DefaultRecomputeFirst
	}
	return r
}

// Explicit returns tenant's rule as configured, without defaults: what
// the configuration asks of every engine, which one that cannot honour it
// is refused for.
func (s Splice) Explicit(tenant string) SpliceRule { return s.For(tenant, RecomputesNothing) }

// Defaulted reports whether the host leaves max_kl and recompute.first
// to their defaults (a tenant's unset key inherits the host's, so a default
// reaches a tenant only through an unset host key): an engine that can do
// neither is then told once what it gets instead.
func (s Splice) Defaulted() (maxKL, first bool) {
	return s.MaxKL == nil, s.Recompute.First == nil
}

// Rules lists the host's explicit rule and every tenant's (the host's
// first), for checks that must hold for all of them.
func (s Splice) Rules() []SpliceRule {
	out := []SpliceRule{s.Explicit("")}
	names := make([]string, 0, len(s.Tenants))
	for t := range s.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		out = append(out, s.Explicit(t))
	}
	return out
}

// WithoutDefaults returns s with every setting left unset set to 0, so
// splices recompute only what a directive or a set key asks: a benchmark
// whose arms each say what they recompute.
func (s Splice) WithoutDefaults() Splice {
	zero, none := 0, 0.0
	s.Recompute.First = orElse(s.Recompute.First, &zero)
	s.MaxKL = orElse(s.MaxKL, &none)
	return s
}

func orElse[T any](p, q *T) *T {
	if p != nil {
		return p
	}
	return q
}

func valueOr[T any](p *T, v T) T {
	if p != nil {
		return *p
	}
	return v
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
	check("splice.", c.Splice.Explicit(""))
	names := make([]string, 0, len(c.Splice.Tenants))
	for t := range c.Splice.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		check(fmt.Sprintf("splice.tenants.%s.", t), c.Splice.Explicit(t))
	}
}
