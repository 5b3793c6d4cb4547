package refengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// restartConfig is a host with a disk tier on dataDir, so pages written
// there come back after a restart.
func restartConfig(dataDir string) config.Config {
	c := config.Default()
	c.DataDir = dataDir
	c.HTTP.Listen = ""
	c.NATS.Listen = ""
	c.Index.PageSize = hostPage
	c.Tiers.Device.CapacityPages = 128
	c.Tiers.Host.CapacityPages = 256
	c.Tiers.Disk.CapacityPages = 1024
	c.Tiers.Remote.CapacityPages = 0
	c.Mover.StepInterval = 10 * time.Millisecond
	c.PolicyRuntime.TickInterval = time.Second
	return c
}

// runDaemon runs a host on c until the returned stop is called (or the
// test ends).
func runDaemon(t *testing.T, c config.Config, opts ...daemon.Option) (*daemon.Daemon, func()) {
	t.Helper()
	d, err := daemon.New(c, hclog.NewNullLogger(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("host Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("host did not stop within 15s")
		}
	}
	t.Cleanup(stop)
	return d, stop
}

func controlFor(t *testing.T, c config.Config) *controlclient.UnixClient {
	t.Helper()
	ctl, err := controlclient.DialUnix(c.ControlSocket(), controlclient.UnixOptions{Source: "harness"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	return ctl
}

func hashesOf(toks []uint32, tenant string) []directive.Hash {
	h := blockid.Compute(toks[:len(toks)/hostPage*hostPage], hostPage, blockid.Salt{Namespace: tenant})
	out := make([]directive.Hash, len(h.Sequence))
	for i, s := range h.Sequence {
		out[i] = directive.Hash(s)
	}
	return out
}

func apply(t *testing.T, ctl *controlclient.UnixClient, ds ...directive.Directive) {
	t.Helper()
	reply, err := ctl.Apply(ctxT(t), directive.Turn{Directives: ds})
	if err != nil || !reply.OK() {
		t.Fatalf("apply %T: %+v %v", ds[0], reply, err)
	}
}

// waitOnDisk waits until every full page of toks has a disk copy.
func waitOnDisk(t *testing.T, d *daemon.Daemon, toks []uint32) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		d.Index().Do(func(ix *cache.Index) {
			for _, h := range hashesOf(toks, "") {
				if p, ok := ix.Lookup("", uint64(h)); ok && p.Tiers.Has(tier.Disk) {
					n++
				}
			}
		})
		if n == len(toks)/hostPage {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pages reached the disk tier", n, len(toks)/hostPage)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A host without a configured model (the pools open when the engine
// registers) is restarted on the same data dir: the engine re-registers,
// the pinned prefix is still a hit (loaded back from the disk tier, every
// row passing the contract check), the pin and the lease came back, and
// the paused session resumes and hits.
func TestPinsAndPausedSessionSurviveDaemonRestart(t *testing.T) {
	t.Run("pools-at-register", func(t *testing.T) { pinsAndPauseSurviveRestart(t, false) })
	// With a configured model the pools open (and the stored pins and
	// leases are restored) at start, before the engine registers.
	t.Run("configured-model", func(t *testing.T) { pinsAndPauseSurviveRestart(t, true) })
}

func pinsAndPauseSurviveRestart(t *testing.T, configured bool) {
	c := restartConfig(t.TempDir())
	if configured {
		m := refengine.GQA(hostPage)
		c.Model = config.Model{Name: m.Name, Attention: "mha", DType: m.DType, Layers: m.Layers, KVHeads: m.KVHeads,
			HeadDim: m.HeadDim, RopeDim: m.RopeDim, RopeStyle: m.RopeStyle}
	}
	d, stop := runDaemon(t, c)
	e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	g := &tokens{next: 11}
	pinned, paused := g.take(4*hostPage), g.take(5*hostPage)
	for s, toks := range map[string][]uint32{"pinned": pinned, "paused": paused} {
		if _, err := e.Turn(ctxT(t), s, "", toks); err != nil {
			t.Fatal(err)
		}
	}
	ctl := controlFor(t, c)
	ph := hashesOf(pinned, "")
	apply(t, ctl, directive.Cache{BlockHashes: ph[len(ph)-1:], Pin: true, TTL: directive.TTLOf(time.Hour)})
	// Pinned pages are written through to the disk tier on their own
	// (pins_restart_test.go); warming them there as well changes nothing.
	keys := make([]directive.BlockKey, len(ph))
	for i, h := range ph {
		keys[i] = directive.BlockKey(h.String())
	}
	apply(t, ctl, directive.Warm{BlockKeys: keys, TargetTier: "disk"})
	apply(t, ctl, directive.Pause{BlockHashes: hashesOf(paused, ""), TTL: directive.TTLOf(time.Hour), LeaseID: "lease-1"})
	waitOnDisk(t, d, pinned)
	waitOnDisk(t, d, paused)
	boot := e.Client().Registration().BootID
	stop()

	d2, _ := runDaemon(t, c)
	st, err := e.Turn(ctxT(t), "pinned", "", pinned)
	if err != nil {
		t.Fatalf("turn after the restart: %v", err)
	}
	if reg := e.Client().Registration(); reg.BootID == boot || reg.Generation != 2 {
		t.Fatalf("the engine did not re-register: %+v (old boot %s)", reg, boot)
	}
	if st.Cached != len(pinned) || st.LoadedPages == 0 || st.CheckedRows == 0 {
		t.Fatalf("pinned prefix after restart: cached %d of %d, %d pages loaded, %d rows checked", st.Cached, len(pinned), st.LoadedPages, st.CheckedRows)
	}
	var (
		p      cache.PageInfo
		lease  cache.LeaseInfo
		leased bool
		now    time.Duration
	)
	d2.Index().Do(func(ix *cache.Index) {
		p, _ = ix.Lookup("", uint64(ph[len(ph)-1]))
		lease, leased = ix.Lease("lease-1")
		now = ix.Config().Clock.Now()
	})
	if p.PinCount != 1 || p.PinExpiry-now < 59*time.Minute {
		t.Fatalf("pin after restart: %+v", p)
	}
	if !leased || lease.Pages != len(paused)/hostPage {
		t.Fatalf("lease after restart: %+v (found %v)", lease, leased)
	}
	ctl2 := controlFor(t, c)
	apply(t, ctl2, directive.Resume{LeaseID: "lease-1"})
	st, err = e.Turn(ctxT(t), "paused", "", paused)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cached != len(paused) || st.CheckedRows == 0 {
		t.Fatalf("resumed session after restart: cached %d of %d, %d rows checked", st.Cached, len(paused), st.CheckedRows)
	}
}
