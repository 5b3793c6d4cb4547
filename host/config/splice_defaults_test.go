package config

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// Nothing configured: each engine gets the measured default it can
// honour, the guard where it ranks kept tokens, the first tokens where
// only they can be recomputed, nothing where it can do neither. An
// explicit 0 turns a default off, for the host or one tenant.
func TestSpliceDefaultsFollowTheEngine(t *testing.T) {
	guard := SpliceRule{MaxKL: DefaultMaxKL}
	first := SpliceRule{First: DefaultRecomputeFirst}
	for _, tc := range []struct {
		name, yaml, tenant string
		want               map[Recomputes]SpliceRule
	}{
		{"built-in", "", "", map[Recomputes]SpliceRule{RecomputesRanked: guard, RecomputesFirst: first, RecomputesNothing: {}}},
		{"guard off", "splice: {max_kl: 0}\n", "", map[Recomputes]SpliceRule{RecomputesRanked: {}, RecomputesFirst: first}},
		{"first off", "splice: {recompute: {first: 0}}\n", "", map[Recomputes]SpliceRule{RecomputesRanked: guard, RecomputesFirst: {}}},
		{"a budget of its own", "splice: {max_kl: 0.002}\n", "", map[Recomputes]SpliceRule{
			RecomputesRanked: {MaxKL: 0.002}, RecomputesFirst: {First: DefaultRecomputeFirst, MaxKL: 0.002}}},
		{"one tenant off", "splice: {tenants: {bulk: {max_kl: 0, recompute: {first: 0}}}}\n", "bulk",
			map[Recomputes]SpliceRule{RecomputesRanked: {}, RecomputesFirst: {}}},
		{"the others keep the defaults", "splice: {tenants: {bulk: {max_kl: 0, recompute: {first: 0}}}}\n", "acme",
			map[Recomputes]SpliceRule{RecomputesRanked: guard, RecomputesFirst: first}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			if tc.yaml != "" {
				var err error
				if c, err = Load(writeFile(t, tc.yaml), nil); err != nil {
					t.Fatal(err)
				}
			}
			for can, want := range tc.want {
				if got := c.Splice.For(tc.tenant, can); got != want {
					t.Errorf("engine recomputing %v: %+v, want %+v", can, got, want)
				}
			}
			if tc.yaml == "" && c.Splice.Explicit("").Any() {
				t.Errorf("the built-in defaults ask every engine for %+v; an engine that cannot recompute would be refused", c.Splice.Explicit(""))
			}
		})
	}
}

// The defaults are the settings the README reports as measured: this fails
// when one drifts from the other.
func TestSpliceDefaultsAreTheMeasuredOnes(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pattern string
		want    float64
	}{
		{"the quality guard at\\s+`splice.max_kl: ([0-9.]+)`", DefaultMaxKL},
		{"door's\\s+`splice.recompute.first: ([0-9]+)`", DefaultRecomputeFirst},
		{"Defaults:\\s+`splice.max_kl: ([0-9.]+)`", DefaultMaxKL},
		{"and\\s+`splice.recompute.first: ([0-9]+)` through", DefaultRecomputeFirst},
	} {
		m := regexp.MustCompile(tc.pattern).FindSubmatch(readme)
		if m == nil {
			t.Errorf("README.md does not say %q any more", tc.pattern)
			continue
		}
		if got, _ := strconv.ParseFloat(string(m[1]), 64); got != tc.want {
			t.Errorf("README.md reports %q with %v; the built-in default is %v", tc.pattern, got, tc.want)
		}
	}
}
