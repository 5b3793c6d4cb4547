package mover

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/syncbuf"
	"github.com/kvpilot/kvpilot/host/tier"
)

// brokenDisk is the pools with a disk tier whose every write fails, as a
// full or broken disk does.
type brokenDisk struct{ Pools }

func (b brokenDisk) Store(t tier.Tier) pool.Store {
	s := b.Pools.Store(t)
	if t == tier.Disk && s != nil {
		return failingStore{s}
	}
	return s
}

type failingStore struct{ pool.Store }

var errDiskBroken = errors.New("disk put: alloc 1 slots: pool full")

func (failingStore) Put(context.Context, pool.Entry, []byte) error { return errDiskBroken }

// Pause copies to a failing tier are tried again only after a growing
// wait, each failure is counted, the log keeps one line per tier pair per
// interval, and the lease ends degraded with its pages evictable. The
// operator's host retried 190 times a second and logged each one.
func TestFailingPauseBacksOffCountedAndQuiet(t *testing.T) {
	h := newHost(t, hostConfig{dataDir: t.TempDir()})
	var failures atomic.Int64
	var logs syncbuf.Buffer
	var err error
	h.mv, err = New(Options{Index: h.g, Pools: brokenDisk{h.pools}, Workers: 4, Retries: -1,
		OnFailure: func(from, to tier.Tier) {
			if from == tier.Device && to == tier.Disk {
				failures.Add(1)
			}
		},
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	s := h.commit("acme", 0, 4)
	ctx := context.Background()
	if _, _, err := h.mv.Pause(ctx, s.target(), "L", tier.Disk, time.Hour); err == nil {
		t.Fatal("a pause to a broken disk settled")
	}
	// A host steps every few milliseconds: without a backoff each step
	// copied again. The index's clock stands still here, so no step may.
	first := failures.Load()
	if first == 0 || first > 4 {
		t.Fatalf("first attempt: %d failures counted, want 1..4", first)
	}
	for i := 0; i < 50; i++ {
		h.mv.Step(ctx)
	}
	if got := failures.Load(); got != first {
		t.Fatalf("%d more copies tried within the backoff", got-first)
	}
	// Each later attempt waits longer; after a few the lease is degraded.
	for wait := 100 * time.Millisecond; wait <= 10*time.Second; wait *= 2 {
		h.clock.Advance(wait)
		h.mv.Step(ctx)
	}
	var li cache.LeaseInfo
	h.g.Do(func(ix *cache.Index) { li, _ = ix.Lease("L") })
	if !li.Degraded || !strings.Contains(li.Reason, "disk") {
		t.Fatalf("lease after failed attempts: %+v", li)
	}
	if n := strings.Count(logs.String(), "transfer failed"); n != 1 {
		t.Fatalf("%d 'transfer failed' lines for one tier pair within %v, want 1:\n%s", n, failureLogEvery, logs.String())
	}
}
