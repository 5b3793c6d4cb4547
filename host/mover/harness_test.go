package mover

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/nats-io/nats.go/jetstream"
)

const pageTokens = 4

var testLayout = layout.MHA("mover-test", pageTokens, layout.BF16, 2, 2, 32, 32, layout.HalfSplit)

// host is one kvpilot host's storage side: real pools (memfd device and
// host arenas, a page file, the JetStream bucket), an index and a mover.
type host struct {
	t     *testing.T
	g     *guarded.Index // ix with the lock the mover takes
	ix    *cache.Index
	clock *cache.ManualClock
	pools *tiers.Set
	mv    *Mover
}

type hostConfig struct {
	dataDir                    string
	js                         jetstream.JetStream
	device, hostPages, diskPgs int
	write                      cache.WritePolicy
	deviceHigh, deviceLow      float64
}

func newHost(t *testing.T, c hostConfig) *host {
	t.Helper()
	if c.device == 0 {
		c.device, c.hostPages, c.diskPgs = 32, 64, 128
	}
	ctx := context.Background()
	pools, err := tiers.Open(ctx, tiers.Options{Layout: &testLayout, DevicePages: c.device, DeviceBackend: tiers.BackendMemfd,
		HostPages: c.hostPages, DiskDir: filepath.Join(c.dataDir, "disk"), DiskPages: c.diskPgs, DiskFsync: disk.FsyncBatch,
		RemoteJS: c.js, RemoteBucket: "kv-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pools.Close() })
	clock := cache.NewManualClock(time.Second)
	cfg := cache.Config{PageSize: pageTokens, DeviceWrite: c.write, Clock: clock}
	if c.deviceHigh == 0 {
		c.deviceHigh, c.deviceLow = 1, 0.9
	}
	cfg.Tiers[tier.Device] = cache.TierConfig{Capacity: c.device, High: c.deviceHigh, Low: c.deviceLow, PinFraction: 0.5}
	cfg.Tiers[tier.Host] = cache.TierConfig{Capacity: c.hostPages, High: 1, Low: 0.9, PinFraction: 0.5}
	cfg.Tiers[tier.Disk] = cache.TierConfig{Capacity: c.diskPgs, High: 1, Low: 0.9, PinFraction: 0.5}
	if c.js != nil {
		cfg.Tiers[tier.Remote] = cache.TierConfig{Capacity: 1 << 20, High: 1, Low: 0.9, PinFraction: 0.5}
	}
	ix, err := cache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, ix: ix, g: guarded.New(ix), clock: clock, pools: pools}
	h.mv, err = New(Options{Index: h.g, Pools: pools, Workers: 4, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func startNATS(t *testing.T, dir string) *natsembed.NATS {
	t.Helper()
	n, err := natsembed.Start(natsembed.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func js(t *testing.T, n *natsembed.NATS) jetstream.JetStream {
	t.Helper()
	j, err := n.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// pageBytes is the deterministic content of a page: what the engine would
// have prefilled for (tenant, seq).
func pageBytes(tenant string, seq uint64) []byte {
	p := make([]byte, testLayout.PageBytes())
	x := seq ^ uint64(len(tenant))*0x9e3779b97f4a7c15 | 1
	for i := 0; i+8 <= len(p); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
	return p
}

// session is a committed token sequence.
type session struct {
	tenant string
	tokens []uint32
	seqs   []uint64
}

func (s session) target() cache.Target { return cache.TargetHashes(s.tenant, s.seqs...) }

// commit plays the engine: allocate device slots, write each page's
// bytes, commit, and run the write-through step.
func (h *host) commit(tenant string, base, pages int) session {
	h.t.Helper()
	tokens := make([]uint32, pages*pageTokens)
	for i := range tokens {
		tokens[i] = uint32(base + i)
	}
	hs := blockid.Compute(tokens, pageTokens, blockid.Salt{Namespace: tenant})
	slots, err := h.pools.Device.Alloc(nil, pages)
	if err != nil {
		h.t.Fatal(err)
	}
	locs := make([]uint64, pages)
	for i, s := range slots {
		if err := h.pools.Device.WritePage(s, pageBytes(tenant, hs.Sequence[i])); err != nil {
			h.t.Fatal(err)
		}
		locs[i] = uint64(s)
	}
	var res cache.CommitResult
	h.g.Do(func(ix *cache.Index) { err = ix.Commit(tenant, hs, locs, &res) })
	if err != nil {
		h.t.Fatal(err)
	}
	for _, u := range res.Unused {
		h.pools.Device.Free(pool.Slot(u))
	}
	return session{tenant: tenant, tokens: tokens, seqs: hs.Sequence}
}

// tiersOf returns where the index has a page.
func (h *host) tiersOf(tenant string, seq uint64) (pi cache.PageInfo, ok bool) {
	h.g.Do(func(ix *cache.Index) { pi, ok = ix.Lookup(tenant, seq) })
	return pi, ok
}

// verify checks that every page of s on tier t holds exactly its bytes.
func (h *host) verify(s session, t tier.Tier) {
	h.t.Helper()
	got := make([]byte, testLayout.PageBytes())
	for _, seq := range s.seqs {
		pi, ok := h.tiersOf(s.tenant, seq)
		if !ok || !pi.Tiers.Has(t) {
			h.t.Fatalf("page %x of %s is not on %s (tiers %v)", seq, s.tenant, t, pi.Tiers.Tiers())
		}
		var err error
		if mem := h.pools.Memory(t); mem != nil {
			err = mem.ReadPage(pool.Slot(pi.Loc[t]), got)
		} else {
			err = h.pools.Store(t).Get(context.Background(), pool.Key{Namespace: s.tenant, Seq: seq}, got)
		}
		if err != nil {
			h.t.Fatalf("read page %x on %s: %v", seq, t, err)
		}
		if !bytes.Equal(got, pageBytes(s.tenant, seq)) {
			h.t.Fatalf("page %x on %s holds different bytes", seq, t)
		}
	}
}

// only asserts that every page of s is on exactly the given tiers.
func (h *host) only(s session, want ...tier.Tier) {
	h.t.Helper()
	var set cache.TierSet
	for _, t := range want {
		set |= 1 << t
	}
	for _, seq := range s.seqs {
		pi, _ := h.tiersOf(s.tenant, seq)
		if pi.Tiers != set {
			h.t.Fatalf("page %x on %v, want %v", seq, pi.Tiers.Tiers(), want)
		}
	}
}

// check runs the index's invariant check and accounting against the pools.
func (h *host) check() {
	h.t.Helper()
	// The pools are read under the index lock too, so no copy lands
	// between the two counts.
	h.g.Do(func(ix *cache.Index) {
		if err := ix.Check(); err != nil {
			h.t.Fatalf("index inconsistent: %v", err)
		}
		if n := ix.InFlight(); n != 0 {
			h.t.Fatalf("%d transitions still in flight", n)
		}
		st := ix.Stats()
		for _, t := range []tier.Tier{tier.Device, tier.Host, tier.Disk} {
			p := h.pools.Memory(t)
			var used int64
			if p != nil {
				used = p.Stats().Used
			} else {
				used = h.pools.Store(t).Stats().Used
			}
			if int(used) != st.Tiers[t].Pages {
				h.t.Fatalf("%s: pool holds %d pages, index %d", t, used, st.Tiers[t].Pages)
			}
		}
	})
}

type blockidHashes = blockid.Hashes

func computeHashes(s session) blockid.Hashes {
	return blockid.Compute(s.tokens, pageTokens, blockid.Salt{Namespace: s.tenant})
}
