package daemon

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// modelConfig is a host with a tiny model, so the pools open at start.
func modelConfig(t testing.TB) config.Config {
	c := testConfig(t)
	c.Index.PageSize = 4
	c.Model = config.Model{Name: "tiny", Attention: "mha", DType: "bf16", Layers: 2, KVHeads: 1, HeadDim: 8, RopeDim: 8, RopeStyle: "half_split"}
	c.Tiers.Device.CapacityPages = 8
	c.Tiers.Host.CapacityPages = 16
	c.Tiers.Disk.CapacityPages = 64
	c.Tiers.Remote.CapacityPages = 0
	c.Mover.StepInterval = 10 * time.Millisecond
	return c
}

// commitPages writes a recognizable page into device slots and commits the
// token pages to the index, as an engine would after a prefill.
func commitPages(t testing.TB, d *Daemon, tenant string, toks []uint32) (blockid.Hashes, [][]byte) {
	t.Helper()
	dev := d.core.pools.Memory(tier.Device)
	pageBytes := dev.Stats().PageBytes
	h := blockid.Compute(toks, d.cfg.Index.PageSize, blockid.Salt{Namespace: tenant})
	slots, err := dev.Alloc(nil, len(h.Sequence))
	if err != nil {
		t.Fatal(err)
	}
	pages := make([][]byte, len(slots))
	locs := make([]uint64, len(slots))
	for i, s := range slots {
		pages[i] = bytes.Repeat([]byte{byte(17*i + 3)}, int(pageBytes))
		if err := dev.WritePage(s, pages[i]); err != nil {
			t.Fatal(err)
		}
		locs[i] = uint64(s)
	}
	var res cache.CommitResult
	d.Index().Do(func(ix *cache.Index) { err = ix.Commit(tenant, h, locs, &res) })
	if err != nil {
		t.Fatal(err)
	}
	return h, pages
}

// commitTokens commits token pages to the index with made-up device
// locations, for hosts without pools.
func commitTokens(t *testing.T, d *Daemon, tenant string, toks []uint32, pageSize int) blockid.Hashes {
	t.Helper()
	h := blockid.Compute(toks, pageSize, blockid.Salt{Namespace: tenant})
	locs := make([]uint64, len(h.Sequence))
	for i := range locs {
		locs[i] = uint64(i)
	}
	var res cache.CommitResult
	var err error
	d.Index().Do(func(ix *cache.Index) { err = ix.Commit(tenant, h, locs, &res) })
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: plugin processes start slowly on a loaded machine
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leaseNow reads lease id and the index's clock.
func leaseNow(ix *cache.Index, id string) (cache.LeaseInfo, bool, time.Duration) {
	li, ok := ix.Lease(id)
	return li, ok, ix.Config().Clock.Now()
}

func pageInfo(d *Daemon, tenant string, seq uint64) (p cache.PageInfo, ok bool) {
	d.Index().Do(func(ix *cache.Index) { p, ok = ix.Lookup(tenant, seq) })
	return p, ok
}

func TestPausedSessionSurvivesRestart(t *testing.T) {
	c := modelConfig(t)
	d, stop := start(t, c)
	h, pages := commitPages(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	last := h.Sequence[len(h.Sequence)-1]

	// Write-through reaches the host tier on its own (the step loop).
	waitFor(t, "write-through to host", func() bool {
		p, _ := pageInfo(d, "acme", last)
		return p.Tiers.Has(tier.Host)
	})
	reply := d.core.in.Apply(context.Background(), directive.Turn{
		Source: "test", Tenant: "acme",
		Directives: []directive.Directive{
			directive.Cache{BlockHashes: []directive.Hash{directive.Hash(h.Sequence[0])}, Pin: true, TTL: directive.TTLOf(time.Hour)},
			directive.Pause{BlockHashes: []directive.Hash{directive.Hash(last)}, TTL: directive.TTLOf(time.Hour), LeaseID: "s1"},
		},
	})
	if reply.Status != directive.StatusOK {
		t.Fatalf("pause refused: %+v", reply)
	}
	waitFor(t, "pause to settle on disk alone", func() bool {
		for _, s := range h.Sequence {
			p, _ := pageInfo(d, "acme", s)
			if !p.Tiers.Has(tier.Disk) || p.Tiers.Has(tier.Device) || p.Tiers.Has(tier.Host) {
				return false
			}
		}
		return true
	})
	stop()

	// A new host on the same data dir finds the pages on disk and can load
	// them back with the same bytes.
	d2, stop2 := start(t, c)
	defer stop2()
	for _, s := range h.Sequence {
		if p, ok := pageInfo(d2, "acme", s); !ok || !p.Tiers.Has(tier.Disk) {
			t.Fatalf("page %d not restored from disk: %+v", s, p)
		}
	}
	// The lease and the pin came back too, expiring about when they would
	// have (the restart took well under a minute).
	var (
		lease cache.LeaseInfo
		ok    bool
		now   time.Duration
	)
	d2.Index().Do(func(ix *cache.Index) { lease, ok, now = leaseNow(ix, "s1") })
	if !ok || lease.Tenant != "acme" || lease.Pages != len(h.Sequence) || lease.Expiry-now < 59*time.Minute {
		t.Fatalf("lease after restart: %+v (ok %v)", lease, ok)
	}
	if p, _ := pageInfo(d2, "acme", h.Sequence[0]); p.PinCount != 1 || p.PinTTL != time.Hour || p.PinExpiry-now < 59*time.Minute {
		t.Fatalf("pin after restart: %+v", p)
	}
	// Resume, not a bare load-back: while the lease stands, the step loop
	// keeps its pages on the pause tier alone, and would drop a device copy
	// loaded beside it (a load-back raced it once in three loaded runs).
	reply = d2.core.in.Apply(context.Background(), directive.Turn{Source: "test", Tenant: "acme",
		Directives: []directive.Directive{directive.Resume{LeaseID: "s1"}}})
	if reply.Status != directive.StatusOK {
		t.Fatalf("resume refused: %+v", reply)
	}
	waitFor(t, "the resumed pages on the device", func() bool {
		for _, s := range h.Sequence {
			if p, _ := pageInfo(d2, "acme", s); !p.Tiers.Has(tier.Device) {
				return false
			}
		}
		return true
	})
	dev := d2.core.pools.Memory(tier.Device)
	got := make([]byte, dev.Stats().PageBytes)
	for i, s := range h.Sequence {
		p, _ := pageInfo(d2, "acme", s)
		if err := dev.ReadPage(pool.Slot(p.Loc[tier.Device]), got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pages[i]) {
			t.Fatalf("page %d came back with different bytes", i)
		}
	}
}

// A cached page (made-up locations: no pools) cannot be warmed while no
// pools are open: the refusal is unavailable, not a missing block.
// TestAttachmentsFollowRegistration shows Warm accepted once an engine
// registered.
func TestWarmRefusedWithoutPools(t *testing.T) {
	d, stop := start(t, testConfig(t))
	defer stop()
	h := commitTokens(t, d, "acme", make([]uint32, 2*d.Config().Index.PageSize), d.Config().Index.PageSize)
	reply := d.core.in.Apply(context.Background(), directive.Turn{
		Source: "test", Tenant: "acme",
		Directives: []directive.Directive{directive.Warm{BlockKeys: []directive.BlockKey{directive.BlockKey(directive.Hash(h.Sequence[1]).String())}, TargetTier: "host"}},
	})
	if reply.Status == directive.StatusOK || reply.Error == nil || reply.Error.Code != errcode.Unavailable {
		t.Fatalf("warm with no pools to carry it out: %+v, want unavailable", reply)
	}
}
