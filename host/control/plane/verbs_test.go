package plane

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// transports runs f once over the Control socket and once over NATS, each
// against a fresh host.
func transports(t *testing.T, f func(t *testing.T, e *env, c controlclient.Client)) {
	for _, name := range []string{"uds", "nats"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var c controlclient.Client = e.uds
			if name == "nats" {
				c = e.nc
			}
			f(t, e, c)
		})
	}
}

func apply(t *testing.T, c controlclient.Client, tenant string, ds ...directive.Directive) directive.TurnReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Apply(ctx, directive.Turn{ID: "t", Tenant: tenant, Directives: ds})
	if err != nil {
		t.Fatalf("apply %v: transport error %v", ds, err)
	}
	if len(r.Results) != len(ds) {
		t.Fatalf("%d results for %d directives: %+v", len(r.Results), len(ds), r)
	}
	return r
}

func ok(t *testing.T, r directive.TurnReply) directive.Effect {
	t.Helper()
	if !r.OK() {
		t.Fatalf("refused: %v (%+v)", r.Error, r.Results)
	}
	return r.Results[0].Effect
}

func refused(t *testing.T, r directive.TurnReply, index int, code errcode.Code) {
	t.Helper()
	if r.OK() || r.Error == nil || r.Error.Code != code || r.Error.Index != index {
		t.Fatalf("got status %s error %v, want %s at directive %d", r.Status, r.Error, code, index)
	}
}

func hs(seqs ...uint64) []directive.Hash {
	out := make([]directive.Hash, len(seqs))
	for i, s := range seqs {
		out[i] = directive.Hash(s)
	}
	return out
}

func TestEveryVerbEndToEnd(t *testing.T) {
	transports(t, func(t *testing.T, e *env, c controlclient.Client) {
		a := e.commit("acme", toks(0, 16)).Sequence  // 4 pages
		b := e.commit("acme", toks(100, 8)).Sequence // 2 pages
		const tenant = "acme"

		// Cache pin: the block and its ancestors.
		eff := ok(t, apply(t, c, tenant, directive.Cache{BlockHashes: hs(a[3]), Pin: true, TTL: directive.TTLOf(time.Minute)}))
		if eff.Blocks != 1 || eff.TTL.Duration() != time.Minute {
			t.Fatalf("pin effect %+v", eff)
		}
		for _, s := range a {
			if p, _ := e.page(tenant, s); p.PinCount != 1 {
				t.Fatalf("page %d pin count %d after pin", s, p.PinCount)
			}
		}
		// Cache unpin.
		ok(t, apply(t, c, tenant, directive.Cache{BlockHashes: hs(a[3]), Pin: false}))
		if p, _ := e.page(tenant, a[0]); p.PinCount != 0 {
			t.Fatalf("pin count %d after unpin", p.PinCount)
		}
		// Think: mark transient, then purge the transient leaf.
		ok(t, apply(t, c, tenant, directive.Think{BlockHashes: hs(a[3]), Transient: true}))
		if p, _ := e.page(tenant, a[3]); !p.Transient {
			t.Fatal("not marked transient")
		}
		ok(t, apply(t, c, tenant, directive.Think{BlockHashes: hs(a[3]), Transient: false}))
		if _, cached := e.page(tenant, a[3]); cached {
			t.Fatal("transient leaf not purged")
		}
		// Warm: the block and its ancestors are copied to the host tier by
		// the mover (here: the planned copies are counted).
		before := e.trans
		eff = ok(t, apply(t, c, tenant, directive.Warm{BlockKeys: []directive.BlockKey{directive.BlockKey(strconv.FormatUint(a[2], 10))}, TargetTier: "CPU_TIER1"}))
		if eff.Blocks != 3 || e.trans-before != 3 {
			t.Fatalf("warm effect %+v, %d transitions", eff, e.trans-before)
		}
		// Pause, renew, revoke.
		eff = ok(t, apply(t, c, tenant, directive.Pause{BlockHashes: hs(b[1]), TTL: directive.TTLOf(time.Minute), LeaseID: "L1"}))
		l, found := e.lease("L1")
		if !found || l.Pages != 2 || eff.LeaseID != "L1" {
			t.Fatalf("lease after pause: %+v %v (effect %+v)", l, found, eff)
		}
		ok(t, apply(t, c, tenant, directive.RenewLease{LeaseID: "L1", NewTTL: directive.TTL(time.Hour)}))
		if l2, _ := e.lease("L1"); l2.Expiry-l.Expiry < 50*time.Minute {
			t.Fatalf("renew moved expiry by %v", l2.Expiry-l.Expiry)
		}
		ok(t, apply(t, c, tenant, directive.RevokeLease{LeaseID: "L1"}))
		if _, found := e.lease("L1"); found {
			t.Fatal("lease survives revoke")
		}
		if _, cached := e.page(tenant, b[0]); cached {
			t.Fatal("revoked lease's blocks still cached")
		}
		// Prune: descendants go, the block stays.
		eff = ok(t, apply(t, c, tenant, directive.Prune{AfterBlockHash: directive.Hash(a[0])}))
		if _, cached := e.page(tenant, a[1]); cached || eff.Blocks != 2 {
			t.Fatalf("prune effect %+v; a[1] cached %v", eff, cached)
		}
		if _, cached := e.page(tenant, a[0]); !cached {
			t.Fatal("prune removed the block itself")
		}
		// Span verbs: accepted and validated, then refused (this host has no
		// device pool to splice in: unavailable; Share and text
		// replacements: not supported yet), nothing changed.
		snap := e.snapshot(tenant, a[0])
		for _, d := range []directive.Directive{
			directive.Splice{Session: "s", Start: 4, End: 8, Replacement: directive.Replacement{Text: "[cut]"}, Mode: directive.ModeAmortize},
			directive.Evict{Session: "s", Start: 4, End: 8},
			directive.Pin{Session: "s", End: 8, TTL: directive.TTLOf(time.Minute)},
			directive.Retain{Session: "s", Start: 0, End: 8, Priority: 80},
			directive.Resume{LeaseID: "L1"},
			directive.Share{Session: "s", End: 8, Scope: directive.ScopeTenant},
		} {
			r := apply(t, c, tenant, d)
			if r.OK() || r.Error == nil || (r.Error.Code != errcode.NotSupportedYet && r.Error.Code != errcode.UnknownLease && r.Error.Code != errcode.Unavailable) {
				t.Errorf("%s: %+v", d.Verb(), r.Error)
			}
		}
		if got := e.snapshot(tenant, a[0]); got != snap {
			t.Fatalf("span verbs changed the index:\n%s\n%s", snap, got)
		}

		// cache_control actions.
		d := e.commit("acme", toks(500, 12)).Sequence // 3 pages
		cc := func(req directive.CacheControl) directive.CacheControlReply {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := c.CacheControl(ctx, req, tenant)
			if err != nil {
				t.Fatalf("%s: %v", req.Action, err)
			}
			if r.Status != directive.StatusOK || r.WorkerID != "42" {
				t.Fatalf("%s: %+v", req.Action, r)
			}
			return r
		}
		if r := cc(directive.CacheControl{Action: directive.ActionPinBlocks, BlockHashes: hs(d[2]), WorkerID: "42"}); r.PinnedCount == nil || *r.PinnedCount != 1 {
			t.Fatalf("pin_blocks %+v", r)
		}
		if p, _ := e.page(tenant, d[0]); p.PinCount != 1 {
			t.Fatal("pin_blocks did not pin the ancestors")
		}
		if r := cc(directive.CacheControl{Action: directive.ActionUnpinBlocks, BlockHashes: hs(d[2])}); r.UnpinnedCount == nil || *r.UnpinnedCount != 1 {
			t.Fatalf("unpin_blocks %+v", r)
		}
		if r := cc(directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: toks(500, 12), TTL: directive.TTLOf(time.Minute)}); r.Count() != 3 || r.TotalBlocks == nil || *r.TotalBlocks != 3 {
			t.Fatalf("pin_prefix %+v", r)
		}
		if p, _ := e.page(tenant, d[2]); p.PinCount != 1 {
			t.Fatal("pin_prefix did not pin")
		}
		if r := cc(directive.CacheControl{Action: directive.ActionUnpinPrefix, TokenIDs: toks(500, 12)}); r.Count() != 3 {
			t.Fatalf("unpin_prefix %+v", r)
		}
		if r := cc(directive.CacheControl{Action: directive.ActionEvictDescendants, BlockHashes: hs(d[0])}); r.EvictedCount == nil || *r.EvictedCount != 2 {
			t.Fatalf("evict_descendants %+v", r)
		}
		if _, cached := e.page(tenant, d[1]); cached {
			t.Fatal("evict_descendants left a descendant")
		}

		// Every applied directive is in the audit log with its source.
		recs := e.ring.Records()
		if len(recs) == 0 {
			t.Fatal("no audit records")
		}
		for _, rec := range recs {
			want := "uds:uid="
			if _, isNATS := c.(*controlclient.NATSClient); isNATS {
				want = "nats:_INBOX."
			}
			if len(rec.Source) < len(want) || rec.Source[:len(want)] != want {
				t.Fatalf("audit source %q, want prefix %q", rec.Source, want)
			}
		}
	})
}

func TestStatsOverSocket(t *testing.T) {
	e := newEnv(t)
	a := e.commit("", toks(0, 16)).Sequence
	ok(t, apply(t, e.uds, "", directive.Cache{BlockHashes: hs(a[1]), Pin: true}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.uds.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.WorkerID != "42" || s.PageSizeTokens != pageSize || len(s.Tiers) != 4 || s.Tiers[0].Tier != "device" {
		t.Fatalf("stats %+v", s)
	}
	if d := s.Tiers[0]; d.Pages != 4 || d.PinnedPages != 2 || d.Bytes != 0 {
		t.Fatalf("device stats %+v", d)
	}
	if _, err := e.nc.Stats(ctx); !errcodeIs(err, errcode.WrongTransport) {
		t.Fatalf("stats over NATS: %v", err)
	}
}

func errcodeIs(err error, code errcode.Code) bool {
	e, ok := errcode.As(err)
	return ok && e.Code == code
}
