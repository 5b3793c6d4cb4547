package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func TestPinAndUnpin(t *testing.T) {
	e := newEnv(t)
	h := e.commit("", toks(0, 12)) // 3 pages
	r := e.apply("", directive.Cache{BlockHashes: hs(h.Sequence[2], 999), Pin: true})
	mustOK(t, r)
	if eff := r.Results[0].Effect; eff.Blocks != 1 || eff.Missing != 1 || eff.TTL.Duration() != 300*time.Second {
		t.Fatalf("effect %+v", eff)
	}
	for _, s := range h.Sequence { // ancestors pinned too
		if e.info("", s).PinCount != 1 {
			t.Fatalf("page %d not pinned", s)
		}
	}
	mustOK(t, e.apply("", directive.Cache{BlockHashes: hs(h.Sequence[2])}))
	if e.info("", h.Sequence[0]).PinCount != 0 {
		t.Fatal("unpin did not release the ancestors")
	}
	// Local hashes walk as a path from the root; signed values
	// are bit-cast by the decoder before they get here.
	r = e.apply("", directive.Cache{BlockHashes: hs(h.Local...), Pin: true, TTL: directive.TTLOf(time.Hour)})
	mustOK(t, r)
	if p := e.info("", h.Sequence[2]); p.PinCount != 1 || p.PinTTL != time.Hour {
		t.Fatalf("pin by local path: %+v", p)
	}
	// Nothing cached: unknown_block, nothing changed.
	mustRefuse(t, e.apply("", directive.Cache{BlockHashes: hs(1, 2), Pin: true}), 0, errcode.UnknownBlock)
}

func TestTurnIsAllOrNone(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 8))      // 2 pages
	b := e.commit("", toks(100, 8))    // 2 pages
	big := e.commit("", toks(200, 28)) // 7 pages: with a and b over the 8-page budget
	mustOK(t, e.apply("", directive.Cache{BlockHashes: hs(b.Sequence[1]), Pin: true, TTL: directive.TTLOf(90 * time.Second)}))
	e.clock.Advance(time.Second)
	bBefore := e.info("", b.Sequence[1])

	r := e.apply("",
		directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true},       // applied, then undone
		directive.Cache{BlockHashes: hs(b.Sequence[1])},                  // unpin, then restored
		directive.Think{BlockHashes: hs(a.Sequence[1]), Transient: true}, // marked, then cleared
		directive.Cache{BlockHashes: hs(big.Sequence[6]), Pin: true},     // over budget
	)
	mustRefuse(t, r, 3, errcode.PinBudgetExhausted)
	if p := e.info("", a.Sequence[1]); p.PinCount != 0 || p.Transient {
		t.Fatalf("a not restored: %+v", p)
	}
	if p := e.info("", b.Sequence[1]); p.PinCount != 1 || p.PinExpiry != bBefore.PinExpiry || p.PinTTL != bBefore.PinTTL {
		t.Fatalf("b not restored exactly: before %+v, after %+v", bBefore, p)
	}
	if e.ix.Stats().PinnedPages != 2 {
		t.Fatalf("pinned pages %d, want b's 2", e.ix.Stats().PinnedPages)
	}
	recs := e.ring.Records()
	last := recs[len(recs)-4:]
	for i, rec := range last {
		if rec.Status != directive.StatusError || rec.Source != "test" || rec.Index != i {
			t.Errorf("audit %d: %+v", i, rec)
		}
	}
	if last[3].Code != errcode.PinBudgetExhausted || last[0].Code != errcode.TurnAborted || last[1].Mode != "unpin" {
		t.Errorf("audit codes %+v", last)
	}
}

func TestInvalidDirectiveChangesNothing(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 8))
	before := e.ix.Stats()
	r := e.apply("",
		directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true},
		directive.Prune{AfterBlockHash: directive.Hash(a.Sequence[0])},
		directive.Pause{BlockHashes: hs(a.Sequence[1])}, // no lease id
	)
	mustRefuse(t, r, 2, errcode.MissingField)
	if after := e.ix.Stats(); after.PinnedPages != before.PinnedPages || after.Pages != before.Pages || len(e.freed) != 0 {
		t.Fatalf("turn changed the index: %+v -> %+v", before, after)
	}
}

// TestSpanVerbsWithoutSplicer: with no splicer attached, span verbs are
// refused (unavailable), Share is not built yet, and the turn's other
// directives are rolled back.
func TestSpanVerbsWithoutSplicer(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 8))
	for _, tc := range []struct {
		d    directive.Directive
		code errcode.Code
	}{
		{directive.Splice{Session: "s", Start: 4, End: 8, Replacement: directive.Replacement{Text: "x"}}, errcode.Unavailable},
		{directive.Evict{Session: "s", Start: 4, End: 8}, errcode.Unavailable},
		{directive.Pin{Session: "s", End: 8}, errcode.Unavailable},
		{directive.Retain{Session: "s", Start: 0, End: 8, Priority: 50}, errcode.Unavailable},
		{directive.Share{Session: "s", End: 8}, errcode.NotSupportedYet},
		{directive.Resume{LeaseID: "l"}, errcode.UnknownLease},
	} {
		r := e.apply("", directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true}, tc.d)
		mustRefuse(t, r, 1, tc.code)
		if e.info("", a.Sequence[1]).PinCount != 0 {
			t.Fatalf("%s: the pin before it was applied", tc.d.Verb())
		}
	}
}

func TestPruneFreesDescendants(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 16))                   // 4 pages
	e.commit("", append(toks(0, 8), toks(50, 8)...)) // a sibling branch under page 2
	r := e.apply("", directive.Prune{AfterBlockHash: directive.Hash(a.Sequence[1])})
	mustOK(t, r)
	if got := r.Results[0].Effect.Blocks; got != 4 {
		t.Fatalf("pruned %d pages, want 4", got)
	}
	if len(e.freed) != 4 || !e.ix.Contains("", a.Sequence[1]) || e.ix.Contains("", a.Sequence[2]) {
		t.Fatalf("freed %v", e.freed)
	}
}

func TestThinkMarkAndPurge(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 16)) // 4 pages
	mustOK(t, e.apply("", directive.Think{BlockHashes: hs(a.Sequence[1:]...), Transient: true}))
	// Purging page 1 alone would orphan pages 2 and 3: that needs a splice.
	// Purging pages 1..3 (a transient tail) removes all three.
	r := e.apply("", directive.Think{BlockHashes: hs(a.Sequence[1]), Transient: false})
	mustRefuse(t, r, 0, errcode.NotSupportedYet)
	r = e.apply("", directive.Think{BlockHashes: hs(a.Sequence[1:]...), Transient: false})
	mustOK(t, r)
	if r.Results[0].Effect.Blocks != 3 || e.ix.Contains("", a.Sequence[1]) || !e.ix.Contains("", a.Sequence[0]) {
		t.Fatalf("purge %+v", r.Results[0].Effect)
	}
}

func TestLeases(t *testing.T) {
	e := newEnv(t)
	a := e.commit("acme", toks(0, 8))
	r := e.apply("acme", directive.Pause{BlockHashes: hs(a.Sequence[1]), LeaseID: "L", TTL: directive.TTLOf(time.Minute)})
	mustOK(t, r)
	if eff := r.Results[0].Effect; eff.LeaseID != "L" || eff.Blocks != 2 || eff.TTL.Duration() != time.Minute {
		t.Fatalf("pause %+v", eff)
	}
	mustRefuse(t, e.apply("acme", directive.Pause{BlockHashes: hs(a.Sequence[1]), LeaseID: "L"}), 0, errcode.LeaseExists)
	mustRefuse(t, e.apply("other", directive.RenewLease{LeaseID: "L", NewTTL: directive.TTL(time.Hour)}), 0, errcode.TenantMismatch)
	mustRefuse(t, e.apply("acme", directive.RevokeLease{LeaseID: "nope"}), 0, errcode.UnknownLease)

	mustOK(t, e.apply("acme", directive.RenewLease{LeaseID: "L", NewTTL: directive.TTL(time.Hour)}))
	if li, _ := e.ix.Lease("L"); li.Expiry != e.clock.Now()+time.Hour {
		t.Fatalf("renew: expiry %v", li.Expiry)
	}
	// The turn's own revoke is followed: revoke then renew the same lease fails.
	r = e.apply("acme", directive.RevokeLease{LeaseID: "L"}, directive.RenewLease{LeaseID: "L", NewTTL: 60})
	mustRefuse(t, r, 1, errcode.UnknownLease)
	// An indefinite pause (no ttl_seconds) gets the lease clamp's maximum.
	r = e.apply("acme", directive.Pause{BlockHashes: hs(a.Sequence[0]), LeaseID: "M"}, directive.RevokeLease{LeaseID: "L"})
	mustOK(t, r)
	if r.Results[0].Effect.TTL.Duration() != DefaultLeaseTTL.Max {
		t.Fatalf("indefinite lease ttl %v", r.Results[0].Effect.TTL)
	}
	if _, ok := e.ix.Lease("L"); ok {
		t.Fatal("lease L survived its revoke")
	}
}

func TestWarm(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Attachments.Transitions = nil })
	a := e.commit("", toks(0, 8))
	key := directive.BlockKey(fmt.Sprint(a.Sequence[1]))
	mustRefuse(t, e.apply("", directive.Warm{BlockKeys: []directive.BlockKey{key}, TargetTier: "CPU_TIER1"}), 0, errcode.Unavailable)

	e = newEnv(t)
	a = e.commit("", toks(0, 8))
	key = directive.BlockKey(fmt.Sprintf("0x%x", a.Sequence[1]))
	r := e.apply("", directive.Warm{BlockKeys: []directive.BlockKey{key, "abc123..."}, TargetTier: "CPU_TIER1"})
	mustOK(t, r)
	if eff := r.Results[0].Effect; eff.Blocks != 2 || eff.Missing != 1 || len(e.trans) != 2 || e.trans[0].To != tier.Host {
		t.Fatalf("warm %+v, transitions %v", eff, e.trans)
	}
	mustRefuse(t, e.apply("", directive.Warm{BlockKeys: []directive.BlockKey{key}, TargetTier: "remote"}), 0, errcode.InvalidTier)
	// The format's published example verbatim: its placeholder keys name no block.
	d, err := directive.DecodeCommand([]byte(`{"type": "Warm", "block_keys": ["abc123...", "def456..."], "target_tier": "CPU_TIER1"}`), directive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, e.apply("", d), 0, errcode.UnknownBlock)
}

func TestCacheControl(t *testing.T) {
	e := newEnv(t)
	h := e.commit("", toks(0, 8))
	ctx := context.Background()
	seed := fmt.Sprintf(`{"action": "pin_blocks", "block_hashes": [%d, 15292316782987903195], "worker_id": 42}`, h.Sequence[1])
	r := e.ex.CacheControlJSON(ctx, "router", "", []byte(seed))
	if r.Status != "ok" || r.PinnedCount == nil || *r.PinnedCount != 1 || r.Message != "Pinned 1/2 blocks" || r.WorkerID != "42" {
		t.Fatalf("pin_blocks reply %+v", r)
	}
	r = e.ex.CacheControl(ctx, "router", "", directive.CacheControl{Action: directive.ActionUnpinPrefix, TokenIDs: toks(0, 10)})
	if r.Status != "ok" || *r.UnpinnedCount != 2 || *r.TotalBlocks != 2 || e.info("", h.Sequence[0]).PinCount != 0 {
		t.Fatalf("unpin_prefix reply %+v", r)
	}
	r = e.ex.CacheControl(ctx, "router", "", directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: toks(0, 8), TTL: directive.TTLOf(time.Minute)})
	if r.Status != "ok" || *r.PinnedCount != 2 || e.info("", h.Sequence[1]).PinTTL != time.Minute {
		t.Fatalf("pin_prefix reply %+v", r)
	}
	r = e.ex.CacheControl(ctx, "router", "", directive.CacheControl{Action: directive.ActionEvictDescendants, BlockHashes: hs(h.Sequence[0])})
	if r.Status != "ok" || *r.EvictedCount != 1 || e.ix.Contains("", h.Sequence[1]) {
		t.Fatalf("evict_descendants reply %+v", r)
	}
	r = e.ex.CacheControl(ctx, "router", "", directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: hs(1), WorkerID: "7"})
	if r.Status != "error" || r.Code != errcode.WrongWorker {
		t.Fatalf("wrong worker reply %+v", r)
	}
	r = e.ex.CacheControlJSON(ctx, "router", "", []byte(`{"action":"pin_blocks","block_hashes":[123]}`))
	if r.Status != "error" || r.Code != errcode.UnknownBlock || r.Message == "" {
		t.Fatalf("unknown reply %+v", r)
	}
	r = e.ex.CacheControlJSON(ctx, "router", "", []byte(`{"action":"pin_blocks","block_hashes":[1.5]}`))
	if r.Status != "error" || r.Code != errcode.InvalidHash {
		t.Fatalf("bad hash reply %+v", r)
	}
}

func TestApplyJSONHostile(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 8))
	for _, payload := range []string{
		`{"type":"Cache","block_hashes":[` + fmt.Sprint(a.Sequence[1]) + `],"pin":true,"evil":1}`,
		`[{"type":"Cache","block_hashes":[` + fmt.Sprint(a.Sequence[1]) + `],"pin":true},{"type":"Nope"}]`,
		`{"type":"Cache","block_hashes":[` + fmt.Sprint(a.Sequence[1]) + `],"pin":true}` + string(make([]byte, 2<<20)),
		"\x00\x01",
	} {
		r := e.ex.ApplyJSON(context.Background(), "nats:kv-control-42", "", []byte(payload))
		if r.OK() || r.Error == nil {
			t.Fatalf("%.60q accepted", payload)
		}
		if _, ok := errcode.Lookup(r.Error.Code); !ok {
			t.Fatalf("unregistered code %q", r.Error.Code)
		}
	}
	if e.info("", a.Sequence[1]).PinCount != 0 {
		t.Fatal("a refused payload pinned something")
	}
	if recs := e.ring.Records(); len(recs) != 4 || recs[0].Source != "nats:kv-control-42" {
		t.Fatalf("refusals not audited: %+v", recs)
	}
	// A cancelled context refuses before starting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := e.ex.Apply(ctx, directive.Turn{Directives: []directive.Directive{directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true}}})
	if r.OK() || r.Error.Code != errcode.DeadlineExceeded {
		t.Fatalf("cancelled: %+v", r)
	}
}

func TestTenantsAreSeparate(t *testing.T) {
	e := newEnv(t)
	a := e.commit("acme", toks(0, 8))
	mustRefuse(t, e.apply("other", directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true}), 0, errcode.UnknownBlock)
	// pin_prefix hashes with the tenant's salt.
	r := e.ex.CacheControl(context.Background(), "router", "acme", directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: toks(0, 8)})
	if r.Status != "ok" || *r.PinnedCount != 2 {
		t.Fatalf("tenant pin_prefix %+v", r)
	}
}

func TestFileAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	fa, err := OpenFileAudit(path, true)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Audit = fa })
	a := e.commit("", toks(0, 8))
	mustOK(t, e.apply("", directive.Cache{BlockHashes: hs(a.Sequence[1]), Pin: true}, directive.Think{BlockHashes: hs(a.Sequence[1]), Transient: true}))
	mustRefuse(t, e.apply("", directive.RevokeLease{LeaseID: "x"}), 0, errcode.UnknownLease)
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadAuditFile(path)
	if err != nil || len(recs) != 3 {
		t.Fatalf("records %+v %v", recs, err)
	}
	if recs[0].Verb != "Cache" || recs[0].Mode != "pin" || recs[0].Effect.Blocks != 1 || recs[1].Mode != "mark" || recs[2].Code != errcode.UnknownLease {
		t.Fatalf("records %+v", recs)
	}
	if err := fa.Append(recs); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

func TestRingWraps(t *testing.T) {
	r := NewRing(3)
	for i := range 5 {
		r.Append([]Record{{Index: i}})
	}
	got := r.Records()
	if len(got) != 3 || got[0].Index != 2 || got[2].Index != 4 || r.Total() != 5 {
		t.Fatalf("ring %+v", got)
	}
}

// ParseTierName (sdk, which may not import host/) must agree with tier.Parse.
func TestTierNamesAgree(t *testing.T) {
	for _, name := range []string{"device", "host", "disk", "remote", "GPU", "CPU_TIER1", "host_pinned", "external", "L9", ""} {
		sdkName, sdkErr := directive.ParseTierName(name)
		ht, hostErr := tier.Parse(name)
		if (sdkErr == nil) != (hostErr == nil) || (sdkErr == nil && string(sdkName) != ht.String()) {
			t.Errorf("%q: sdk %q %v, host %v %v", name, sdkName, sdkErr, ht, hostErr)
		}
	}
}
