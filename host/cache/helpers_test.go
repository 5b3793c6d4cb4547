package cache

import (
	"errors"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

const testPage = 4

// testConfig is a small hierarchy: device 16 pages, host 64, disk 256, no
// remote; pins may take half of each tier, so the budget is 8 pages.
func testConfig(clock Clock) Config {
	return Config{
		PageSize: testPage,
		Tiers: [tier.Count]TierConfig{
			tier.Device: {Capacity: 16, High: 0.75, Low: 0.5, PinFraction: 0.5},
			tier.Host:   {Capacity: 64, High: 0.9, Low: 0.5, PinFraction: 0.5},
			tier.Disk:   {Capacity: 256, High: 0.9, Low: 0.5, PinFraction: 0.5},
		},
		DeviceWrite: WriteNone,
		Clock:       clock,
	}
}

type harness struct {
	t     testing.TB
	ix    *Index
	clock *ManualClock
	loc   uint64
}

func newHarness(t testing.TB, mod ...func(*Config)) *harness {
	t.Helper()
	clock := NewManualClock(time.Second)
	cfg := testConfig(clock)
	for _, m := range mod {
		m(&cfg)
	}
	ix, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &harness{t: t, ix: ix, clock: clock}
}

// tokens returns n tokens starting at base: base, base+1, ...
func tokens(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

func cat(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// commit matches and commits toks for tenant with fresh device locations,
// returning the hashes of its full pages.
func (h *harness) commit(tenant string, toks []uint32) blockid.Hashes {
	h.t.Helper()
	return h.commitSalt(tenant, blockid.Salt{Namespace: tenant}, toks)
}

func (h *harness) commitSalt(tenant string, salt blockid.Salt, toks []uint32) blockid.Hashes {
	h.t.Helper()
	var m MatchResult
	h.ix.Match(tenant, salt, toks, &m)
	locs := make([]uint64, len(m.Hashes.Local))
	for i := range locs {
		if i < len(m.Pages) && m.Pages[i].Tiers.Has(tier.Device) {
			locs[i] = m.Pages[i].Loc[tier.Device]
			continue
		}
		h.loc++
		locs[i] = h.loc
	}
	var res CommitResult
	if err := h.ix.Commit(tenant, m.Hashes, locs, &res); err != nil {
		h.t.Fatalf("commit: %v", err)
	}
	h.check()
	return blockid.Hashes{Local: append([]uint64(nil), m.Hashes.Local...), Sequence: append([]uint64(nil), m.Hashes.Sequence...)}
}

func (h *harness) match(tenant string, toks []uint32) []Page {
	h.t.Helper()
	var m MatchResult
	h.ix.Match(tenant, blockid.Salt{Namespace: tenant}, toks, &m)
	return m.Pages
}

func (h *harness) info(tenant string, seq uint64) PageInfo {
	h.t.Helper()
	pi, ok := h.ix.Lookup(tenant, seq)
	if !ok {
		h.t.Fatalf("page %d of %q not in the index", seq, tenant)
	}
	return pi
}

func (h *harness) check() {
	h.t.Helper()
	if err := h.ix.Check(); err != nil {
		h.t.Fatalf("invariants: %v", err)
	}
}

// plan runs Plan at the clock's now.
func (h *harness) plan() []Transition {
	h.t.Helper()
	ts := h.ix.Plan(h.clock.Now(), nil)
	h.check()
	return ts
}

// complete reports every transition done, in order, with fresh locations,
// and returns the errors of those the index refused.
func (h *harness) complete(ts []Transition) []error {
	h.t.Helper()
	var errs []error
	for _, tr := range ts {
		var err error
		if tr.Kind == Copy {
			h.loc++
			err = h.ix.CompleteCopy(tr, h.loc)
		} else {
			err = h.ix.CompleteDrop(tr)
		}
		if err != nil {
			errs = append(errs, err)
		}
		h.check()
	}
	return errs
}

// settle plans and completes until nothing is planned (at most n rounds).
func (h *harness) settle(n int) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		ts := h.plan()
		if len(ts) == 0 {
			return
		}
		if errs := h.complete(ts); len(errs) > 0 {
			h.t.Fatalf("round %d: completions refused: %v", i, errs)
		}
	}
	h.t.Fatalf("still planning after %d rounds", n)
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// blockHashes returns the hashes of n pages of tokens 0.. with no salt.
func blockHashes(n int) blockid.Hashes {
	return blockid.Compute(tokens(0, n*testPage), testPage, blockid.Salt{})
}
