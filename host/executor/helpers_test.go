package executor

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

const page = 4

// env is a real cache index (device 16, host 64, disk 256 pages; pins may
// take half of a tier, so the pin budget is 8 pages) behind an executor
// with an in-memory audit ring.
type env struct {
	t     testing.TB
	ix    *cache.Index
	clock *cache.ManualClock
	ex    *Executor
	ring  *Ring
	loc   uint64
	trans []cache.Transition
	freed []cache.Freed
}

func newEnv(t testing.TB, mod ...func(*Config)) *env {
	t.Helper()
	clock := cache.NewManualClock(time.Second)
	ix, err := cache.New(cache.Config{
		PageSize: page,
		Tiers: [tier.Count]cache.TierConfig{
			tier.Device: {Capacity: 16, High: 0.75, Low: 0.5, PinFraction: 0.5},
			tier.Host:   {Capacity: 64, High: 0.9, Low: 0.5, PinFraction: 0.5},
			tier.Disk:   {Capacity: 256, High: 0.9, Low: 0.5, PinFraction: 0.5},
		},
		DeviceWrite: cache.WriteNone,
		Clock:       clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ix: ix, clock: clock, ring: NewRing(64)}
	cfg := Config{
		Index: guarded.New(ix), WorkerID: "42", Audit: e.ring,
		Attachments: Attachments{
			Transitions: func(ts []cache.Transition) { e.trans = append(e.trans, ts...) },
			Free:        func(fs []cache.Freed) { e.freed = append(e.freed, fs...) },
		},
		Now: func() time.Time { return time.Unix(1700000000, 0).UTC() },
	}
	for _, m := range mod {
		m(&cfg)
	}
	if e.ex, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func toks(base, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(base + i)
	}
	return out
}

// commit caches toks for tenant on the device and returns its hashes.
func (e *env) commit(tenant string, tokens []uint32) blockid.Hashes {
	e.t.Helper()
	var m cache.MatchResult
	e.ix.Match(tenant, blockid.Salt{Namespace: tenant}, tokens, &m)
	locs := make([]uint64, len(m.Hashes.Local))
	for i := range locs {
		e.loc++
		locs[i] = e.loc
	}
	var res cache.CommitResult
	if err := e.ix.Commit(tenant, m.Hashes, locs, &res); err != nil {
		e.t.Fatal(err)
	}
	return blockid.Hashes{Local: append([]uint64(nil), m.Hashes.Local...), Sequence: append([]uint64(nil), m.Hashes.Sequence...)}
}

func (e *env) info(tenant string, seq uint64) cache.PageInfo {
	e.t.Helper()
	p, ok := e.ix.Lookup(tenant, seq)
	if !ok {
		e.t.Fatalf("page %d of %q not cached", seq, tenant)
	}
	return p
}

func (e *env) apply(tenant string, ds ...directive.Directive) directive.TurnReply {
	e.t.Helper()
	r := e.ex.Apply(context.Background(), directive.Turn{ID: "t", Source: "test", Tenant: tenant, Directives: ds})
	if len(r.Results) != len(ds) {
		e.t.Fatalf("%d results for %d directives", len(r.Results), len(ds))
	}
	var err error
	e.ex.cfg.Index.Do(func(ix *cache.Index) { err = ix.Check() }) // background splice fills commit under the same lock
	if err != nil {
		e.t.Fatalf("index invariants after turn: %v", err)
	}
	return r
}

// mustOK fails unless the reply applied.
func mustOK(t *testing.T, r directive.TurnReply) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("turn refused: %v (results %+v)", r.Error, r.Results)
	}
}

// mustRefuse checks a refused turn: directive bad failed with code, every
// other directive says turn_aborted.
func mustRefuse(t *testing.T, r directive.TurnReply, bad int, code errcode.Code) {
	t.Helper()
	if r.OK() || r.Error == nil || r.Error.Code != code || r.Error.Index != bad {
		t.Fatalf("got %v (status %s), want %s at directive %d", r.Error, r.Status, code, bad)
	}
	for i, res := range r.Results {
		want := errcode.TurnAborted
		if i == bad {
			want = code
		}
		if res.OK() || res.Error == nil || res.Error.Code != want {
			t.Errorf("result %d: %+v, want %s", i, res, want)
		}
	}
}

func hs(seqs ...uint64) []directive.Hash {
	out := make([]directive.Hash, len(seqs))
	for i, s := range seqs {
		out[i] = directive.Hash(s)
	}
	return out
}
