package mover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/tier"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestBytesThroughEveryTier moves pages along every path the host uses and
// checks the bytes after each: write-through device->host, pause
// device->disk and ->remote, warm disk->host, load-back remote->device and
// disk->device.
func TestBytesThroughEveryTier(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n := startNATS(t, filepath.Join(dir, "nats"))
	h := newHost(t, hostConfig{dataDir: dir, js: js(t, n)})

	a := h.commit("tenant-a", 0, 5)
	if r := h.mv.Step(ctx); r.Copied != 5 || r.Failed != 0 {
		t.Fatalf("write-through: %+v", r)
	}
	h.verify(a, tier.Device)
	h.verify(a, tier.Host)

	// Pause to disk: a disk copy, then the device and host copies freed.
	li, r, err := h.mv.Pause(ctx, a.target(), "lease-a", tier.Disk, time.Hour)
	if err != nil {
		t.Fatalf("pause: %v (%+v)", err, r)
	}
	if !li.Settled || li.Pages != 5 {
		t.Fatalf("lease %+v", li)
	}
	h.only(a, tier.Disk)
	h.verify(a, tier.Disk)
	h.check()

	// Warm disk -> host, then load back host -> device.
	if _, err := h.mv.Warm(ctx, a.target(), tier.Host); err != nil {
		t.Fatal(err)
	}
	h.verify(a, tier.Host)
	if _, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	h.verify(a, tier.Device)

	// A second session paused to the remote bucket, then loaded straight
	// back to the device from there.
	b := h.commit("tenant-b", 1000, 3)
	if _, _, err := h.mv.Pause(ctx, b.target(), "lease-b", tier.Remote, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.only(b, tier.Remote)
	h.verify(b, tier.Remote)
	r, err = h.mv.LoadBack(ctx, b.target(), time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r.Copied != 3 || r.Bytes != int64(3*testLayout.PageBytes()) {
		t.Fatalf("load-back report %+v", r)
	}
	h.verify(b, tier.Device)
	// Resume brings a lease's pages back the same way (already there: no-op).
	if _, err := h.mv.Resume(ctx, "lease-b", tier.Device); err != nil {
		t.Fatal(err)
	}

	// Revoke purges every copy; Release frees the pool side.
	var pr cache.PurgeResult
	h.g.Do(func(ix *cache.Index) { pr, err = ix.RevokeLease("lease-b") })
	if err != nil {
		t.Fatal(err)
	}
	if err := h.mv.Release(ctx, pr.Freed); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pools.Remote.Stat(ctx, pool.Key{Namespace: b.tenant, Seq: b.seqs[0]}); !errors.Is(err, pool.ErrNotFound) {
		t.Fatalf("revoked page still in the bucket: %v", err)
	}
	h.check()
}

// TestWriteBackOnEviction fills the device past its high watermark under
// the write-back policy: the evicted pages are copied to the host before
// their device copies are dropped, and keep their bytes.
func TestWriteBackOnEviction(t *testing.T) {
	ctx := ctxT(t)
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 8, hostPages: 32, diskPgs: 32,
		write: cache.WriteBack, deviceHigh: 0.5, deviceLow: 0.25})
	s := h.commit("t", 0, 6) // 6 of 8 > high (4): evict down to 2
	if h.pools.Host.Stats().Used != 0 {
		t.Fatal("write-back copied before eviction")
	}
	var total Report
	for range 8 {
		total.Merge(h.mv.Step(ctx))
	}
	if total.Failed != 0 || total.Copied == 0 || total.Dropped == 0 {
		t.Fatalf("eviction: %+v", total)
	}
	onDevice := 0
	for _, seq := range s.seqs {
		pi, _ := h.tiersOf(s.tenant, seq)
		if pi.Tiers.Has(tier.Device) {
			onDevice++
		} else if !pi.Tiers.Has(tier.Host) {
			t.Fatalf("evicted page %x was dropped without a host copy", seq)
		}
	}
	if onDevice > 2 {
		t.Fatalf("%d pages left on the device, want at most 2 (%+v)", onDevice, total)
	}
	h.verify(session{tenant: s.tenant, seqs: s.seqs[onDevice:]}, tier.Host)
	h.check()
}

// TestPausedSessionSurvivesRestart pauses to disk, closes every pool and
// the index, reopens on the same data dir with a fresh index, restores it
// from the page file and loads the session back to the device.
func TestPausedSessionSurvivesRestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	h := newHost(t, hostConfig{dataDir: dir})
	a := h.commit("tenant", 0, 6)
	if _, _, err := h.mv.Pause(ctx, a.target(), "lease", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.only(a, tier.Disk)
	if err := h.pools.Close(); err != nil {
		t.Fatal(err)
	}

	h2 := newHost(t, hostConfig{dataDir: dir})
	res, err := h2.mv.Restore(ctx, tier.Disk)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inserted != 6 || res.Orphans != 0 || res.Mismatched != 0 {
		t.Fatalf("restore: %+v", res)
	}
	h2.only(a, tier.Disk)
	// The engine matches the same tokens and finds the whole path.
	var m cache.MatchResult
	h2.g.Do(func(ix *cache.Index) { ix.MatchHashes("tenant", cacheHashes(h2, a), &m) })
	if len(m.Pages) != 6 {
		t.Fatalf("match after restart: %d pages", len(m.Pages))
	}
	if _, err := h2.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	h2.verify(a, tier.Device)
	h2.check()
}

// TestSecondHostWarmsFromRemote: host A pauses a session to the shared
// bucket; host B, another client of the same bucket with its own pools
// and an empty index, imports the path and warms it.
func TestSecondHostWarmsFromRemote(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n := startNATS(t, filepath.Join(dir, "nats"))
	a := newHost(t, hostConfig{dataDir: filepath.Join(dir, "a"), js: js(t, n)})
	s := a.commit("shared", 0, 4)
	if _, _, err := a.mv.Pause(ctx, s.target(), "lease", tier.Remote, time.Hour); err != nil {
		t.Fatal(err)
	}
	a.only(s, tier.Remote)

	conn, err := n.Connect("host-b")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jsB, _ := jetstream.New(conn)
	b := newHost(t, hostConfig{dataDir: filepath.Join(dir, "b"), js: jsB})
	// B is told about the last page only (a Warm command carries keys).
	res, err := b.mv.Import(ctx, tier.Remote, "shared", s.seqs[len(s.seqs)-1:])
	if err != nil {
		t.Fatal(err)
	}
	if res.Inserted != 4 {
		t.Fatalf("import: %+v", res)
	}
	if _, err := b.mv.Warm(ctx, s.target(), tier.Host); err != nil {
		t.Fatal(err)
	}
	b.verify(s, tier.Host)
	if _, err := b.mv.LoadBack(ctx, s.target(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	b.verify(s, tier.Device)
	b.check()
}

// TestCorruptDiskPageRefused corrupts a paused page on disk: the load-back
// fails whole, the corrupt page is reported and never reaches the device,
// and the index stays consistent.
func TestCorruptDiskPageRefused(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	h := newHost(t, hostConfig{dataDir: dir})
	a := h.commit("tenant", 0, 3)
	if _, _, err := h.mv.Pause(ctx, a.target(), "lease", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	corruptDiskRecords(t, h, 3)

	r, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("load-back of corrupt pages: %v", err)
	}
	if len(r.Corrupt) == 0 || !errors.Is(r.Err(), pool.ErrCorrupt) {
		t.Fatalf("corruption not reported: %+v", r)
	}
	for _, seq := range a.seqs {
		if pi, _ := h.tiersOf(a.tenant, seq); pi.Tiers.Has(tier.Device) {
			t.Fatalf("page %x reached the device from a corrupt record", seq)
		}
	}
	if st := h.pools.Disk.Stats(); st.Corrupt == 0 {
		t.Fatal("disk store did not count the corruption")
	}
	// The first page's disk copy was its only one, and its descendants'
	// disk copies cannot stand without it: the whole leased path is lost,
	// said so, and gone from the index and the page file alike.
	if r.LostCopies != 3 || r.LostPages != 3 || r.LostProtected != 3 {
		t.Fatalf("loss not reported: %+v", r)
	}
	for _, seq := range a.seqs {
		if pi, ok := h.tiersOf(a.tenant, seq); ok {
			t.Fatalf("page %x still indexed after its only copy was found corrupt: %+v", seq, pi)
		}
	}
	h.check()
}

// TestCorruptHostPageRefused: a host-tier page changed behind the mover's
// back (the host tier is memory engines map) fails its seal on the way
// back to the device: it never reaches the device, and the index forgets
// it and the descendants' host copies, as for a corrupt disk record.
func TestCorruptHostPageRefused(t *testing.T) {
	ctx := ctxT(t)
	h := newHost(t, hostConfig{dataDir: t.TempDir()})
	a := h.commit("tenant", 0, 3)
	if _, _, err := h.mv.Pause(ctx, a.target(), "lease", tier.Host, time.Hour); err != nil {
		t.Fatal(err)
	}
	h.only(a, tier.Host)
	pi, _ := h.tiersOf(a.tenant, a.seqs[1])
	view, err := h.pools.Host.(pool.PageViewer).PageView(pool.Slot(pi.Loc[tier.Host]))
	if err != nil {
		t.Fatal(err)
	}
	view[len(view)/2] ^= 0x40 // what a stray write by an engine does

	r, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second))
	if !errors.Is(err, ErrIncomplete) || len(r.Corrupt) != 1 || !errors.Is(r.Err(), pool.ErrCorrupt) {
		t.Fatalf("load-back over a changed host page: %v %+v", err, r)
	}
	// The first page is intact and comes back; the second and the third
	// (which cannot stand without it on the host tier) are gone.
	h.verify(session{tenant: a.tenant, seqs: a.seqs[:1]}, tier.Device)
	for _, seq := range a.seqs[1:] {
		if pi, ok := h.tiersOf(a.tenant, seq); ok {
			t.Fatalf("page %x still indexed after its only copy failed its seal: %+v", seq, pi)
		}
	}
	h.check()
}

// TestCorruptDiskCopyFallsBackToRemote: a page with a good remote copy
// behind a corrupt disk copy loses only the disk copy; the next load-back
// reads the remote one.
func TestCorruptDiskCopyFallsBackToRemote(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n := startNATS(t, filepath.Join(dir, "nats"))
	h := newHost(t, hostConfig{dataDir: dir, js: js(t, n)})
	a := h.commit("tenant", 0, 3)
	if _, _, err := h.mv.Pause(ctx, a.target(), "lease", tier.Disk, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := h.mv.Warm(ctx, a.target(), tier.Remote); err != nil {
		t.Fatal(err)
	}
	h.only(a, tier.Disk, tier.Remote)
	corruptDiskRecords(t, h, 3)

	r, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second))
	if !errors.Is(err, ErrIncomplete) || len(r.Corrupt) != 1 {
		t.Fatalf("load-back over a corrupt disk copy: %v %+v", err, r)
	}
	if r.LostCopies != 3 || r.LostPages != 0 || r.LostProtected != 0 {
		t.Fatalf("loss %+v: the disk copies go, the pages stay on remote", r)
	}
	h.only(a, tier.Remote)
	if _, err := h.mv.LoadBack(ctx, a.target(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	h.verify(a, tier.Device)
	h.check()
}

// corruptDiskRecords flips a payload byte of the first n records of the
// page file, whichever pages they hold.
func corruptDiskRecords(t *testing.T, h *host, n int64) {
	t.Helper()
	path := h.pools.Disk.(*disk.Store).Path()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := (int64(512+testLayout.PageBytes()) + 4095) / 4096 * 4096
	for slot := int64(0); slot < n; slot++ {
		b := []byte{0}
		if _, err := f.ReadAt(b, slot*rec+300); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 1
		if _, err := f.WriteAt(b, slot*rec+300); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDropsAcrossBatches: Plan drops a chain's tail at once; submitted as
// separate batches, parents first, each parent's drop must wait for its
// child's (the index answers ErrTransitionOrder) rather than be refused,
// and waiting must not hold a worker: there are more waiting parents than
// workers.
func TestDropsAcrossBatches(t *testing.T) {
	ctx := ctxT(t)
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 16, hostPages: 32, diskPgs: 32,
		write: cache.WriteThrough, deviceHigh: 0.5, deviceLow: 0.125})
	s := h.commit("t", 0, 12)
	if r := h.mv.Step(ctx); r.Copied != 12 || r.Dropped != 0 {
		t.Fatalf("write-through: %+v", r)
	}
	var ts []cache.Transition
	h.g.Do(func(ix *cache.Index) { ts = ix.Plan(h.clock.Now(), nil) })
	if len(ts) != 10 || ts[0].Seq != s.seqs[11] || ts[9].Seq != s.seqs[2] {
		t.Fatalf("plan %v, want the drops of pages 11..2, deepest first", ts)
	}
	var fences []*Fence
	for i := len(ts) - 1; i >= 1; i-- { // every parent before its child, one batch each
		fences = append(fences, h.mv.Submit(ctx, ts[i:i+1]))
	}
	select {
	case <-fences[len(fences)-1].Done():
		r, _ := fences[len(fences)-1].Wait(ctx)
		t.Fatalf("a parent's drop ended before its child's was submitted: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	fences = append(fences, h.mv.Submit(ctx, ts[:1]))
	var total Report
	for _, f := range fences {
		r, err := f.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total.Merge(r)
	}
	if total.Dropped != 10 || total.Refused != 0 || total.Failed != 0 {
		t.Fatalf("drops across batches: %+v", total)
	}
	h.only(session{tenant: s.tenant, seqs: s.seqs[2:]}, tier.Host)
	h.only(session{tenant: s.tenant, seqs: s.seqs[:2]}, tier.Device, tier.Host)
	h.check()
}

// TestFailedTransferLeavesIndexConsistent makes transfers fail for real:
// a closed page file (I/O error) and a host pool smaller than the index
// believes (ErrFull). The index must stay consistent, with nothing in
// flight and no slot leaked.
func TestFailedTransferLeavesIndexConsistent(t *testing.T) {
	ctx := ctxT(t)
	h := newHost(t, hostConfig{dataDir: t.TempDir()})
	a := h.commit("tenant", 0, 4)
	h.pools.Disk.Close()
	_, r, err := h.mv.Pause(ctx, a.target(), "lease", tier.Disk, time.Hour)
	if err == nil || r.Failed == 0 || !errors.Is(r.Err(), pool.ErrClosed) {
		t.Fatalf("pause to a closed disk: %v %+v", err, r)
	}
	h.g.Do(func(ix *cache.Index) {
		if err := ix.Check(); err != nil || ix.InFlight() != 0 {
			t.Fatalf("index: %v, %d in flight", err, ix.InFlight())
		}
	})
	// The pages are still on the device, untouched.
	h.verify(a, tier.Device)

	// Host pool exhausted behind the index's back: write-through fails
	// with ErrFull, is reported, and the slots it could not get are not leaked.
	h2 := newHost(t, hostConfig{dataDir: t.TempDir()})
	grab, err := h2.pools.Host.Alloc(nil, int(h2.pools.Host.Stats().Free))
	if err != nil {
		t.Fatal(err)
	}
	b := h2.commit("tenant", 0, 3)
	r = h2.mv.Step(ctx)
	if r.Failed == 0 || !errors.Is(r.Err(), pool.ErrFull) {
		t.Fatalf("write-through into a full pool: %+v", r)
	}
	h2.pools.Host.Free(grab...)
	// The index queued the failed write-through again, and the copies that
	// waited for it (cancelled with it): one step lands them all.
	if r := h2.mv.Step(ctx); r.Failed != 0 || r.Copied != len(b.seqs) {
		t.Fatalf("retry step: %+v, want %d copies", r, len(b.seqs))
	}
	h2.verify(b, tier.Host)
	h2.verify(b, tier.Device)
	h2.check()
}

// A step cancelled as the host stops fails its whole batch, every
// transition reported to the index (nothing left in flight, the index
// consistent), and the next step lands every copy.
func TestCancelledStepFailsItsBatch(t *testing.T) {
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 256, hostPages: 256, diskPgs: 256})
	s := h.commit("tenant", 0, 200)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// A copy free to start may still win its race with the cancellation,
	// and one under way that the index cancelled meanwhile (a copy it
	// depends on failed) is refused when it lands, and queued again.
	first := h.mv.Step(cancelled)
	if first.Copied+first.Failed+first.Refused != len(s.seqs) || first.Failed == 0 {
		t.Fatalf("cancelled step: %d copied, %d refused, %d failed of %d", first.Copied, first.Refused, first.Failed, len(s.seqs))
	}
	h.g.Do(func(ix *cache.Index) {
		if err := ix.Check(); err != nil || ix.InFlight() != 0 {
			t.Fatalf("index: %v, %d in flight", err, ix.InFlight())
		}
	})
	if r := h.mv.Step(ctxT(t)); r.Failed != 0 || r.Copied != len(s.seqs)-first.Copied {
		t.Fatalf("step after: %d copied, %d failed, want %d copies", r.Copied, r.Failed, len(s.seqs)-first.Copied)
	}
	h.verify(s, tier.Host)
}

// TestConcurrentTransfers runs commits, steps, pauses and load-backs from
// several goroutines at once (run it with -race).
func TestConcurrentTransfers(t *testing.T) {
	ctx := ctxT(t)
	h := newHost(t, hostConfig{dataDir: t.TempDir(), device: 64, hostPages: 128, diskPgs: 256})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				tenant := fmt.Sprintf("g%d", g)
				s := h.commit(tenant, round*1000, 3)
				h.mv.Step(ctx)
				id := fmt.Sprintf("%s-%d", tenant, round)
				if _, _, err := h.mv.Pause(ctx, s.target(), id, tier.Disk, time.Hour); err != nil {
					errs <- err
					return
				}
				if _, err := h.mv.LoadBack(ctx, s.target(), time.Now().Add(10*time.Second)); err != nil {
					errs <- err
					return
				}
				h.verify(s, tier.Device)
				h.verify(s, tier.Disk)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	h.mv.Step(ctx)
	h.check()
}

func cacheHashes(h *host, s session) (hs blockidHashes) {
	return computeHashes(s)
}
