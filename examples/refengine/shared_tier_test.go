package refengine_test

import (
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/natsembed/natscluster"
	"github.com/kvpilot/kvpilot/host/pool/remote/redistest"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// sharedConfig is a host whose Pause keeps pages on the remote tier, the
// JetStream bucket every host on natsURL shares ("" runs the embedded
// server, listening on loopback so a second host can join it).
func sharedConfig(dataDir, natsURL string, worker uint64, replicas int) config.Config {
	c := restartConfig(dataDir)
	c.WorkerID = worker
	c.Tiers.Remote.CapacityPages = 4096
	c.Index.PauseTier = "remote"
	c.Pools.RemoteReplicas = replicas
	c.NATS.URL = natsURL
	if natsURL == "" {
		c.NATS.Listen = "127.0.0.1:0"
	}
	return c
}

// waitLeaseSettled waits until a lease's pages sit on its pause tier alone.
func waitLeaseSettled(t *testing.T, d *daemon.Daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var (
			li cache.LeaseInfo
			ok bool
		)
		d.Index().Do(func(ix *cache.Index) { li, ok = ix.Lease(id) })
		if ok && li.Settled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %s did not settle (found %v: %+v)", id, ok, li)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pauseSessions runs each session on engine e of host c, then pauses it to
// the remote tier under a lease named for it and waits until it is there.
func pauseSessions(t *testing.T, d *daemon.Daemon, c config.Config, e *refengine.Engine, sessions map[string][]uint32) {
	t.Helper()
	ctl := controlFor(t, c)
	for s, toks := range sessions {
		if _, err := e.Turn(ctxT(t), s, "", toks); err != nil {
			t.Fatal(err)
		}
		apply(t, ctl, directive.Pause{BlockHashes: hashesOf(toks, ""), TTL: directive.TTLOf(time.Hour), LeaseID: "lease-" + s})
	}
	for s := range sessions {
		waitLeaseSettled(t, d, "lease-"+s)
	}
}

// warmAndResume warms each session's pages on host d (config c) from the
// shared tier and runs the session again on engine e: every full page must
// be a hit, loaded back and checked row by row by the reference engine.
// Like a harness, it warms again until the pages arrive: a cluster that
// just lost a node answers nothing while its streams elect leaders.
func warmAndResume(t *testing.T, d *daemon.Daemon, c config.Config, e *refengine.Engine, sessions map[string][]uint32) {
	t.Helper()
	ctl := controlFor(t, c)
	for s, toks := range sessions {
		hs := hashesOf(toks, "")
		keys := make([]directive.BlockKey, len(hs))
		for i, h := range hs {
			keys[i] = directive.BlockKey(h.String())
		}
		deadline := time.Now().Add(60 * time.Second)
		for !onTier(d, hs, tier.Host) {
			if time.Now().After(deadline) {
				t.Fatalf("session %s never arrived on the second host's host tier", s)
			}
			reply, err := ctl.Apply(ctxT(t), directive.Turn{Directives: []directive.Directive{directive.Warm{BlockKeys: keys, TargetTier: "host"}}})
			if err != nil || !reply.OK() || reply.Results[0].Effect.Missing != 0 {
				t.Fatalf("warm %s from the shared tier: %+v %v", s, reply, err)
			}
			for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait) && !onTier(d, hs, tier.Host); {
				time.Sleep(20 * time.Millisecond)
			}
		}
		st, err := e.Turn(ctxT(t), s, "", toks)
		if err != nil {
			t.Fatal(err)
		}
		full := len(toks) / hostPage * hostPage
		if st.Cached != full || st.LoadedPages != full/hostPage || st.CheckedRows == 0 {
			t.Fatalf("session %s on the second host: cached %d of %d, %d pages loaded, %d rows checked",
				s, st.Cached, full, st.LoadedPages, st.CheckedRows)
		}
	}
}

// onTier reports whether every page is indexed on tier t.
func onTier(d *daemon.Daemon, hs []directive.Hash, t tier.Tier) (all bool) {
	d.Index().Do(func(ix *cache.Index) {
		for _, h := range hs {
			if p, ok := ix.Lookup("", uint64(h)); !ok || !p.Tiers.Has(t) {
				return
			}
		}
		all = true
	})
	return all
}

// Host A pauses sessions to the remote tier; host B, sharing A's NATS
// server and bucket, has never seen them, warms them by block hash and
// serves them as hits, byte-identical by the reference engine's check.
func TestSecondHostResumesSessionsPausedToTheSharedTier(t *testing.T) {
	ca := sharedConfig(t.TempDir(), "", 1, 1)
	da, _ := runDaemon(t, ca)
	ea := newEngine(t, ca.EngineSocket(), refengine.GQA(hostPage))
	g := &tokens{next: 101}
	sessions := map[string][]uint32{"s1": g.take(5*hostPage + 3), "s2": g.take(3 * hostPage)}
	pauseSessions(t, da, ca, ea, sessions)

	cb := sharedConfig(t.TempDir(), da.NATS().ClientURL(), 2, 1)
	db, _ := runDaemon(t, cb)
	eb := newEngine(t, cb.EngineSocket(), refengine.GQA(hostPage))
	warmAndResume(t, db, cb, eb, sessions)
}

// The shared tier on a real NATS cluster: three nats-server processes with
// the bucket at three replicas. Host A pauses sessions to it; one node is
// SIGKILLed; host B warms and serves half of them. The node comes back,
// every node is restarted in turn (a rolling restart), and host C serves
// the other half: no paused page was lost, every row checked.
func TestSharedTierOnANATSClusterSurvivesNodeLossAndRollingRestart(t *testing.T) {
	cl, ctx := natscluster.ForTest(t, 3)

	ca := sharedConfig(t.TempDir(), cl.URL(), 1, 3)
	da, _ := runDaemon(t, ca)
	ea := newEngine(t, ca.EngineSocket(), refengine.GQA(hostPage))
	g := &tokens{next: 7}
	early := map[string][]uint32{"a1": g.take(6*hostPage + 5), "a2": g.take(4 * hostPage)}
	late := map[string][]uint32{"b1": g.take(5 * hostPage), "b2": g.take(7*hostPage + 1)}
	all := map[string][]uint32{}
	for s, toks := range early {
		all[s] = toks
	}
	for s, toks := range late {
		all[s] = toks
	}
	pauseSessions(t, da, ca, ea, all)

	cl.Kill(0)
	cb := sharedConfig(t.TempDir(), cl.URL(), 2, 3)
	db, _ := runDaemon(t, cb)
	eb := newEngine(t, cb.EngineSocket(), refengine.GQA(hostPage))
	warmAndResume(t, db, cb, eb, early)

	if err := cl.Revive(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i := range cl.Nodes {
		if err := cl.Restart(ctx, i); err != nil {
			t.Fatalf("rolling restart of node %d: %v", i, err)
		}
	}
	cc := sharedConfig(t.TempDir(), cl.URL(), 3, 3)
	dc, _ := runDaemon(t, cc)
	ec := newEngine(t, cc.EngineSocket(), refengine.GQA(hostPage))
	warmAndResume(t, dc, cc, ec, late)
}

// The same over the second backend: a Redis cluster of three primaries
// with a replica each. Host A pauses sessions to it; a primary is
// SIGKILLed and its replica takes over; host B warms and serves them.
func TestSharedTierOnARedisClusterSurvivesAPrimaryLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a six-node redis cluster; run without -short")
	}
	cl := redistest.StartCluster(t, 3, 1)
	redisConfig := func(dir string, worker uint64) config.Config {
		c := sharedConfig(dir, "", worker, 1)
		c.NATS.Listen = "" // each host its own embedded NATS: only Redis is shared
		c.Pools.RemoteBackend = "redis"
		c.Pools.RemoteRedis.Addrs = cl.Addrs()
		return c
	}
	ca := redisConfig(t.TempDir(), 1)
	da, _ := runDaemon(t, ca)
	ea := newEngine(t, ca.EngineSocket(), refengine.GQA(hostPage))
	g := &tokens{next: 501}
	sessions := map[string][]uint32{"r1": g.take(6*hostPage + 2), "r2": g.take(4 * hostPage)}
	pauseSessions(t, da, ca, ea, sessions)

	cl.KillPrimary(t, 30*time.Second)
	cb := redisConfig(t.TempDir(), 2)
	db, _ := runDaemon(t, cb)
	eb := newEngine(t, cb.EngineSocket(), refengine.GQA(hostPage))
	warmAndResume(t, db, cb, eb, sessions)
}
