package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// transports are the three ways a turn reaches a running host: the
// Control socket, the NATS command subject, and the policy sink (a policy
// turn carries the tenant the runtime put in it).
type transports struct {
	uds    *controlclient.UnixClient
	nats   *controlclient.NATSClient
	d      *Daemon
	source string // what the clients name themselves
}

func dialTransports(t *testing.T, d *Daemon, source string) transports {
	t.Helper()
	u, err := controlclient.DialUnix(d.ControlSocket(), controlclient.UnixOptions{Source: source})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	conn, err := d.core.nats.Connect(source)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	n, err := controlclient.NewNATS(conn, controlclient.NATSOptions{Subject: d.cfg.WorkerSubject(), Source: source})
	if err != nil {
		t.Fatal(err)
	}
	return transports{uds: u, nats: n, d: d, source: source}
}

// apply sends turn over the named transport and returns the host's answer.
func (tr transports) apply(t *testing.T, via string, turn directive.Turn) directive.TurnReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch via {
	case "uds":
		r, err := tr.uds.Apply(ctx, turn)
		if err != nil {
			t.Fatalf("uds apply: %v", err)
		}
		return r
	case "nats":
		r, err := tr.nats.Apply(ctx, turn)
		if err != nil {
			t.Fatalf("nats apply: %v", err)
		}
		return r
	default: // the policy runtime's sink, as a plugin's turn arrives
		turn.Source = "policy:test"
		if err := tr.d.applyPolicyTurn(ctx, turn); err != nil {
			return directive.TurnReply{Status: directive.StatusError, Error: errcode.From(err)}
		}
		return directive.TurnReply{Status: directive.StatusOK}
	}
}

// tenantState is everything about a tenant's pages another tenant must not
// be able to change.
func tenantState(d *Daemon, tenant string, seqs []uint64) (s string) {
	d.Index().Do(func(ix *cache.Index) {
		for _, q := range seqs {
			p, ok := ix.Lookup(tenant, q)
			s += fmt.Sprintf("|%d:%v pin=%d tr=%v lease=%q prio=%d", q, ok, p.PinCount, p.Transient, p.Lease, p.Priority)
		}
		for _, l := range ix.Leases() {
			if l.Tenant == tenant {
				s += fmt.Sprintf("|lease %s pages=%d", l.ID, l.Pages)
			}
		}
	})
	return s
}

func isoHashes(seqs ...uint64) []directive.Hash {
	out := make([]directive.Hash, len(seqs))
	for i, s := range seqs {
		out[i] = directive.Hash(s)
	}
	return out
}

func isolationHost(t *testing.T, mod func(*config.Config)) *Daemon {
	c := modelConfig(t)
	c.NATS.RateLimit = 0
	c.Tiers.Device.PinBudget, c.Tiers.Host.PinBudget, c.Tiers.Disk.PinBudget = 1, 1, 1
	if mod != nil {
		mod(&c)
	}
	return startWithEngine(t, c)
}

// Tenant A, through every transport, names tenant B's blocks and lease in
// every verb and cache_control action: B's pages, pins, lease and
// transient flags stay exactly as they were. The same tokens cached by
// both tenants are distinct pages (namespace salt), so A's prefix actions
// reach only A's own pages.
func TestTenantCannotTouchAnotherTenantsPages(t *testing.T) {
	d := isolationHost(t, nil)
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	ha, _ := commitPages(t, d, "a", toks)
	hb, _ := commitPages(t, d, "b", toks)
	for i := range ha.Sequence {
		if ha.Sequence[i] == hb.Sequence[i] {
			t.Fatalf("page %d: tenants share hash %x despite the namespace salt", i, ha.Sequence[i])
		}
	}
	tr := dialTransports(t, d, "iso")
	// B holds a pin on its root and a lease on its leaf, so unpin, renew,
	// revoke and resume have something of B's to aim at.
	if r := tr.apply(t, "uds", directive.Turn{Tenant: "b", Directives: []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(hb.Sequence[0]), Pin: true, TTL: directive.TTLOf(time.Hour)},
		directive.Pause{BlockHashes: isoHashes(hb.Sequence[2]), TTL: directive.TTLOf(time.Hour), LeaseID: "b-lease"},
	}}); !r.OK() {
		t.Fatalf("tenant b's own pin and pause refused: %+v", r)
	}
	b := hb.Sequence
	hostile := []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(b...), Pin: true, TTL: directive.TTLOf(time.Hour)},
		directive.Cache{BlockHashes: isoHashes(b[0]), Pin: false},
		directive.Think{BlockHashes: isoHashes(b[2]), Transient: true},
		directive.Think{BlockHashes: isoHashes(b[2]), Transient: false},
		directive.Prune{AfterBlockHash: directive.Hash(b[0])},
		directive.Pause{BlockHashes: isoHashes(b[1]), TTL: directive.TTLOf(time.Hour), LeaseID: "a-steals"},
		directive.Warm{BlockKeys: []directive.BlockKey{directive.BlockKey(directive.Hash(b[2]).String())}, TargetTier: "device"},
		directive.RenewLease{LeaseID: "b-lease", NewTTL: directive.TTL(48 * time.Hour)},
		directive.RevokeLease{LeaseID: "b-lease"},
		directive.Resume{LeaseID: "b-lease"},
		directive.Retain{Session: "b-session", Start: 0, End: 12, Priority: 90, Duration: directive.TTLOf(time.Hour)},
		directive.Splice{Session: "b-session", Start: 4, End: 8},
	}
	for _, via := range []string{"uds", "nats", "policy"} {
		for _, dir := range hostile {
			before := tenantState(d, "b", b)
			r := tr.apply(t, via, directive.Turn{Tenant: "a", Directives: []directive.Directive{dir}})
			if after := tenantState(d, "b", b); after != before {
				t.Fatalf("%s %s by tenant a changed tenant b (reply %+v):\n before %s\n after  %s", via, dir.Verb(), r, before, after)
			}
			if dir.Verb() == directive.VerbRevokeLease || dir.Verb() == directive.VerbRenewLease || dir.Verb() == directive.VerbResume {
				if r.OK() || r.Error == nil || (via != "policy" && r.Error.Code != errcode.TenantMismatch) {
					t.Fatalf("%s %s of b's lease by a: %+v", via, dir.Verb(), r)
				}
			}
		}
	}
	// cache_control: by hash on B's blocks, and by prefix on the same
	// tokens, which resolve to A's own pages.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cl := range []controlclient.Client{tr.uds, tr.nats} {
		for _, cc := range []directive.CacheControl{
			{Action: directive.ActionPinBlocks, BlockHashes: isoHashes(b...), TTL: directive.TTLOf(time.Hour)},
			{Action: directive.ActionUnpinBlocks, BlockHashes: isoHashes(b[0])},
			{Action: directive.ActionEvictDescendants, BlockHashes: isoHashes(b[0])},
			{Action: directive.ActionPinPrefix, TokenIDs: toks, TTL: directive.TTLOf(time.Hour)},
			{Action: directive.ActionUnpinPrefix, TokenIDs: toks},
		} {
			before := tenantState(d, "b", b)
			r, err := cl.CacheControl(ctx, cc, "a")
			if err != nil {
				t.Fatalf("%T %s: %v", cl, cc.Action, err)
			}
			if after := tenantState(d, "b", b); after != before {
				t.Fatalf("%T %s by tenant a changed tenant b (%+v):\n before %s\n after  %s", cl, cc.Action, r, before, after)
			}
			if cc.Action == directive.ActionPinPrefix {
				// The prefix pin did land, on A's pages: the check above
				// would pass trivially if nothing worked.
				if p, _ := pageInfo(d, "a", ha.Sequence[2]); r.Status != directive.StatusOK || p.PinCount == 0 {
					t.Fatalf("%T pin_prefix for a: %+v, a's leaf pin count %d", cl, r, p.PinCount)
				}
			}
		}
	}
	// B's own requests still work on B's pages.
	if r := tr.apply(t, "nats", directive.Turn{Tenant: "b", Directives: []directive.Directive{directive.RevokeLease{LeaseID: "b-lease"}}}); !r.OK() {
		t.Fatalf("b revoking its own lease: %+v", r)
	}
}

// A watcher scoped to tenant A sees A's events and none of B's.
func TestWatchScopedToTenant(t *testing.T) {
	d := isolationHost(t, nil)
	tr := dialTransports(t, d, "watch")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ready := make(chan struct{})
	got := make(chan []uint64, 16)
	go func() {
		_ = tr.uds.Watch(ctx, controlclient.WatchOptions{Tenant: "a", Ready: func() { close(ready) }}, func(ev controlclient.Event) error {
			if s := ev.Event.Data.Stored; s != nil {
				var seqs []uint64
				for _, bl := range s.Blocks {
					seqs = append(seqs, bl.BlockHash)
				}
				got <- seqs
			}
			return nil
		})
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("watch never became ready")
	}
	hb, _ := commitPages(t, d, "b", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	ha, _ := commitPages(t, d, "a", []uint32{9, 9, 9, 9})
	bs := map[uint64]bool{}
	for _, s := range hb.Sequence {
		bs[s] = true
	}
	for {
		select {
		case seqs := <-got:
			for _, s := range seqs {
				if bs[s] {
					t.Fatalf("tenant a's watcher saw tenant b's block %x", s)
				}
				if s == ha.Sequence[0] {
					return // A's own store arrived after B's commit: B's never came
				}
			}
		case <-ctx.Done():
			t.Fatal("tenant a's watcher never saw its own store")
		}
	}
}

// A flood of pin requests from tenant A, over NATS from many goroutines,
// is refused past A's quota with tenant_quota, while tenant B pins within
// its own quota during the flood; the pinned pages never exceed any tier's
// budget, and the index stays consistent.
func TestPinFloodRefusedPastQuota(t *testing.T) {
	d := isolationHost(t, func(c *config.Config) {
		c.Pins.TenantQuotaPages = 2
		c.Tiers.Device.PinBudget = 0.5 // 4 of 8 device pages
	})
	ha, _ := commitPages(t, d, "a", []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	hb, _ := commitPages(t, d, "b", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	tr := dialTransports(t, d, "flood")
	if r := tr.apply(t, "uds", directive.Turn{Tenant: "a", Directives: []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(ha.Sequence[1]), Pin: true, TTL: directive.TTLOf(time.Hour)}}}); !r.OK() {
		t.Fatalf("a pinning within quota: %+v", r)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[errcode.Code]int{}
	oks := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				leaf := ha.Sequence[2+(g+i)%2]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := tr.nats.Apply(ctx, directive.Turn{Tenant: "a", Directives: []directive.Directive{
					directive.Cache{BlockHashes: isoHashes(leaf), Pin: true, TTL: directive.TTLOf(time.Hour)}}})
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					codes["transport:"+errcode.Code(err.Error())]++
				case r.OK():
					oks++
				default:
					codes[r.Error.Code]++
				}
				mu.Unlock()
			}
		}(g)
	}
	// Tenant B pins during the flood, and the service answers.
	for i := 0; i < 5; i++ {
		if r := tr.apply(t, "uds", directive.Turn{Tenant: "b", Directives: []directive.Directive{
			directive.Cache{BlockHashes: isoHashes(hb.Sequence[1]), Pin: true, TTL: directive.TTLOf(time.Hour)}}}); !r.OK() {
			t.Fatalf("b pinning during a's flood: %+v", r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := tr.uds.Stats(ctx); err != nil {
			t.Fatalf("stats during the flood: %v", err)
		}
		cancel()
	}
	wg.Wait()
	if oks != 0 || codes[errcode.TenantQuota] != 200 {
		t.Fatalf("flood past quota: %d applied, refusals %v; want all 200 refused with %s", oks, codes, errcode.TenantQuota)
	}
	var (
		err error
		st  cache.Stats
		pb  cache.PageInfo
	)
	d.Index().Do(func(ix *cache.Index) {
		err, st = ix.Check(), ix.Stats()
		pb, _ = ix.Lookup("b", hb.Sequence[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.PinnedPages != 4 {
		t.Fatalf("pinned pages %d, want a's 2 and b's 2", st.PinnedPages)
	}
	for _, tt := range tier.All {
		ts := st.Tiers[tt]
		if budget := int(float64(ts.Capacity) * pinBudgetOf(d.cfg, tt)); ts.Pinned > budget {
			t.Fatalf("%s: %d pinned pages over its budget %d", tt, ts.Pinned, budget)
		}
	}
	if pb.PinCount != 5 {
		t.Fatalf("b's pin count %d, want 5", pb.PinCount)
	}
}

// Without a tenant quota, a flood of pins across many tenants stops at the
// tier's pin budget: pins past it are refused with pin_budget_exhausted and
// the pinned pages on each tier never exceed the budget.
func TestPinFloodStopsAtTierBudget(t *testing.T) {
	d := isolationHost(t, func(c *config.Config) { c.Tiers.Device.PinBudget = 0.25 }) // 2 of 8
	tr := dialTransports(t, d, "budget")
	var leaves []uint64
	tenants := []string{"t0", "t1", "t2"}
	for i, tn := range tenants {
		h, _ := commitPages(t, d, tn, []uint32{uint32(i), 1, 2, 3, 4, 5, 6, 7})
		leaves = append(leaves, h.Sequence[1])
	}
	refused := 0
	for i, tn := range tenants {
		r := tr.apply(t, "nats", directive.Turn{Tenant: tn, Directives: []directive.Directive{
			directive.Cache{BlockHashes: isoHashes(leaves[i]), Pin: true, TTL: directive.TTLOf(time.Hour)}}})
		switch {
		case r.OK():
		case r.Error != nil && r.Error.Code == errcode.PinBudgetExhausted:
			refused++
		default:
			t.Fatalf("%s pin: %+v", tn, r)
		}
		var st cache.Stats
		d.Index().Do(func(ix *cache.Index) { st = ix.Stats() })
		if st.Tiers[tier.Device].Pinned > 2 || st.PinnedPages > st.PinBudget {
			t.Fatalf("after %s: device pinned %d, pinned pages %d over budget %d", tn, st.Tiers[tier.Device].Pinned, st.PinnedPages, st.PinBudget)
		}
	}
	if refused != 2 {
		t.Fatalf("%d of 3 two-page pins refused at a two-page budget, want 2", refused)
	}
}

func pinBudgetOf(c config.Config, t tier.Tier) float64 {
	return [tier.Count]float64{c.Tiers.Device.PinBudget, c.Tiers.Host.PinBudget, c.Tiers.Disk.PinBudget, c.Tiers.Remote.PinBudget}[t]
}
