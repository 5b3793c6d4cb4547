// Package disk is the disk tier: pages in a page file under the data dir,
// each with a checksummed header naming its layout fingerprint, namespace
// and sequence hash, so the store's index is rebuilt by scanning the file
// at start and pages survive a host restart.
//
// One file per layout, <dir>/<fingerprint>.pages, holds Pages fixed-size
// records (see record.go). A slot allocator places new pages; the file is
// sparse, so unused capacity costs no disk. A page is verified (header and
// xxh3 of the payload) on every read; one that fails is dropped, counted
// and reported, never served.
package disk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/slots"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Options configure a disk Store.
type Options struct {
	// Dir holds the page files (created 0700 if missing).
	Dir string
	// Layout is the page shape; it is cloned.
	Layout *layout.Layout
	// Pages is the capacity in pages.
	Pages int
	// Fsync is when writes are made durable.
	Fsync FsyncPolicy
	// VerifyOnOpen checks every payload's checksum during the start scan
	// instead of on first read. It reads the whole file.
	VerifyOnOpen bool
	// Logger receives warnings about dropped pages; nil discards.
	Logger hclog.Logger
}

// entry is where one key's page lives. readers counts Gets in flight; a
// retired entry's slot is freed only when the last reader is done, so a
// slot is never rewritten under a read.
type entry struct {
	meta    pool.Entry
	slot    pool.Slot
	gen     uint64
	readers int
	retired bool
}

// Store is the disk tier for one layout. It implements pool.Store.
type Store struct {
	lay    *layout.Layout
	fp     layout.Fingerprint
	pb     int
	rec    int64
	fsync  FsyncPolicy
	log    hclog.Logger
	path   string
	alloc  *slots.Allocator
	closed bool

	// io guards the file descriptor: reads and writes hold it shared,
	// Close exclusively, so no I/O ever runs on a closed (and possibly
	// reused) descriptor number.
	io sync.RWMutex
	f  *os.File

	mu      sync.Mutex
	index   map[pool.Key]*entry
	nextGen uint64
	corrupt int64
}

// Open opens or creates the page file for o.Layout under o.Dir, rebuilds
// the index by scanning it, and drops (and reports) invalid records.
func Open(o Options) (*Store, error) {
	if o.Layout == nil {
		return nil, fmt.Errorf("disk store: no layout")
	}
	if err := o.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("disk store: %w", err)
	}
	if o.Pages < 1 || o.Pages > slots.MaxCapacity {
		return nil, fmt.Errorf("disk store: pages %d is outside 1..%d", o.Pages, slots.MaxCapacity)
	}
	if !o.Fsync.Valid() {
		return nil, fmt.Errorf("disk store: unknown fsync policy %d", o.Fsync)
	}
	if o.Dir == "" {
		return nil, fmt.Errorf("disk store: no directory")
	}
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk store: %w", err)
	}
	lay := o.Layout.Clone()
	fp := lay.Fingerprint()
	path := PageFile(o.Dir, lay)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk store: %w", err)
	}
	// One host per page file: a second would corrupt the first's index.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("disk store %s: locked by another process (is another kvpilot host using this data dir?): %w", path, err)
	}
	alloc, err := slots.New(o.Pages)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("disk store: %w", err)
	}
	s := &Store{lay: lay, fp: fp, pb: lay.PageBytes(), rec: recordSize(lay.PageBytes()), fsync: o.Fsync,
		log: log.Named("disk"), path: path, alloc: alloc, f: f, index: map[pool.Key]*entry{}, nextGen: 1}
	if err := s.scan(o.VerifyOnOpen); err != nil {
		f.Close()
		return nil, err
	}
	// The descriptor beside the pages says what they are, for operators.
	if desc, err := json.MarshalIndent(lay, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(o.Dir, fp.String()+".layout.json"), desc, 0o600)
	}
	return s, nil
}

// PageFile is the page file a disk tier keeps in dir for layout l.
func PageFile(dir string, l *layout.Layout) string {
	return filepath.Join(dir, l.Fingerprint().String()+".pages")
}

// Tier is Disk.
func (s *Store) Tier() tier.Tier { return tier.Disk }

// Layout returns the store's layout (do not modify).
func (s *Store) Layout() *layout.Layout { return s.lay }

// Path is the page file.
func (s *Store) Path() string { return s.path }

// Stats returns slot accounting and the count of dropped corrupt pages.
func (s *Store) Stats() pool.Stats {
	c, u, f := s.alloc.Stats()
	s.mu.Lock()
	corrupt := s.corrupt
	s.mu.Unlock()
	return pool.Stats{Capacity: c, Used: u, Free: f, PageBytes: s.pb, Corrupt: corrupt}
}

func checkKey(k pool.Key) error {
	if len(k.Namespace) > pool.MaxNamespace {
		return fmt.Errorf("%w: namespace of %d bytes, limit %d", pool.ErrKey, len(k.Namespace), pool.MaxNamespace)
	}
	return nil
}

// Put writes page under key into a fresh slot, then retires any older
// copy, so a crash mid-write leaves the old copy readable.
func (s *Store) Put(ctx context.Context, pe pool.Entry, page []byte) error {
	key := pe.Key
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("disk put %v: %w", key, err)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("disk put %v: %w", key, err)
	}
	if err := pool.CheckPage(page, s.pb); err != nil {
		return fmt.Errorf("disk put %v: %w", key, err)
	}
	got, err := s.alloc.Alloc(nil, 1)
	if err != nil {
		return fmt.Errorf("disk put %v: %w", key, err)
	}
	slot := got[0]
	s.mu.Lock()
	gen := s.nextGen
	s.nextGen++
	s.mu.Unlock()

	var hb [headerSize]byte
	seal := func(sum uint64) []byte {
		h := header{fp: s.fp, entry: pe, length: uint32(len(page)), payloadSum: sum, gen: gen}
		h.encode(hb[:])
		return hb[:]
	}
	if err := s.writeRecord(slot, seal, page); err != nil {
		s.tombstone(slot)
		s.alloc.Free(slot)
		return fmt.Errorf("disk put %v: %w", key, err)
	}
	s.mu.Lock()
	old := s.index[key]
	s.index[key] = &entry{meta: pe, slot: slot, gen: gen}
	if old != nil {
		s.retireLocked(old)
	}
	s.mu.Unlock()
	return nil
}

// writeRecord writes page and then the header seal encodes for its
// checksum (overlap.go).
func (s *Store) writeRecord(slot pool.Slot, seal func(sum uint64) []byte, page []byte) error {
	s.io.RLock()
	defer s.io.RUnlock()
	if s.closed {
		return pool.ErrClosed
	}
	if err := writeHashed(int(s.f.Fd()), page, int64(slot)*s.rec, seal); err != nil {
		return err
	}
	if s.fsync == FsyncAlways {
		if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
	}
	return nil
}

// Get reads and verifies the page under key. On ErrCorrupt the record has
// been dropped and dst holds garbage.
func (s *Store) Get(ctx context.Context, key pool.Key, dst []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("disk get %v: %w", key, err)
	}
	if err := pool.CheckPage(dst, s.pb); err != nil {
		return fmt.Errorf("disk get %v: %w", key, err)
	}
	s.mu.Lock()
	e := s.index[key]
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("disk get %v: %w", key, pool.ErrNotFound)
	}
	e.readers++
	s.mu.Unlock()

	var hb [headerSize]byte
	sum, err := s.readRecord(e.slot, hb[:], dst)
	if err == nil {
		err = s.verify(hb[:], key, e.gen, dst, sum)
		if err != nil {
			err = fmt.Errorf("%w: %v", pool.ErrCorrupt, err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	e.readers--
	if errors.Is(err, pool.ErrCorrupt) {
		s.corrupt++
		s.log.Warn("dropped corrupt page", "key", key.String(), "slot", e.slot, "file", s.path, "error", err)
		if s.index[key] == e {
			delete(s.index, key)
		}
		s.retireLocked(e)
	} else if e.retired && e.readers == 0 {
		s.releaseLocked(e)
	}
	if err != nil {
		return fmt.Errorf("disk get %v: %w", key, err)
	}
	return nil
}

// readRecord reads the record at slot and returns its page's checksum
// (overlap.go).
func (s *Store) readRecord(slot pool.Slot, hdr, page []byte) (uint64, error) {
	s.io.RLock()
	defer s.io.RUnlock()
	if s.closed {
		return 0, pool.ErrClosed
	}
	return readHashed(int(s.f.Fd()), page, hdr, int64(slot)*s.rec)
}

// verify checks a record's header against what the index expects, and the
// checksum of the page read against the header's: sum is the page's
// version 2 checksum, recomputed here for a version 1 record.
func (s *Store) verify(hb []byte, key pool.Key, gen uint64, page []byte, sum uint64) error {
	var h header
	if err := h.decode(hb); err != nil {
		return err
	}
	switch {
	case h.fp != s.fp:
		return fmt.Errorf("record is for layout %s, not %s", h.fp, s.fp)
	case h.entry.Key != key || h.gen != gen:
		return fmt.Errorf("record holds %v gen %d, index says %v gen %d", h.entry.Key, h.gen, key, gen)
	case int(h.length) != len(page):
		return fmt.Errorf("record length %d, page is %d", h.length, len(page))
	}
	if h.version != version {
		sum = sumFor(h.version, page)
	}
	if sum != h.payloadSum {
		return fmt.Errorf("payload checksum %016x, stored %016x", sum, h.payloadSum)
	}
	return nil
}

// retireLocked removes e from service: its slot is tombstoned and freed
// now, or when its last reader finishes. Called with mu held.
func (s *Store) retireLocked(e *entry) {
	if e.retired {
		return
	}
	e.retired = true
	if e.readers == 0 {
		s.releaseLocked(e)
	}
}

func (s *Store) releaseLocked(e *entry) {
	s.tombstone(e.slot)
	if err := s.alloc.Free(e.slot); err != nil {
		s.log.Error("freeing disk slot", "slot", e.slot, "error", err)
	}
}

// headerOffset is where slot's header sits: right after its page.
func (s *Store) headerOffset(slot pool.Slot) int64 { return int64(slot)*s.rec + int64(s.pb) }

// tombstone zeroes a record's magic so the start scan treats it as free.
// A failure is logged: at worst the record reappears after a restart,
// where its generation or checksum decides its fate.
func (s *Store) tombstone(slot pool.Slot) {
	s.io.RLock()
	defer s.io.RUnlock()
	if s.closed {
		return
	}
	var zero [4]byte
	if _, err := unix.Pwrite(int(s.f.Fd()), zero[:], s.headerOffset(slot)); err != nil {
		s.log.Error("tombstoning disk record", "slot", slot, "error", err)
	}
}

// Delete removes the page under key; an absent key is not an error. With
// FsyncAlways the deletion is durable on return.
func (s *Store) Delete(ctx context.Context, key pool.Key) error {
	s.mu.Lock()
	e := s.index[key]
	if e != nil {
		delete(s.index, key)
		s.retireLocked(e)
	}
	s.mu.Unlock()
	if e != nil && s.fsync == FsyncAlways {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("disk delete %v: %w", key, err)
		}
	}
	return nil
}

// Stat returns the entry stored under key, or ErrNotFound.
func (s *Store) Stat(_ context.Context, key pool.Key) (pool.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.index[key]
	if e == nil {
		return pool.Entry{}, fmt.Errorf("disk stat %v: %w", key, pool.ErrNotFound)
	}
	return e.meta, nil
}

// List returns every stored page's entry.
func (s *Store) List(context.Context) ([]pool.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]pool.Entry, 0, len(s.index))
	for _, e := range s.index {
		out = append(out, e.meta)
	}
	return out, nil
}

// Sync flushes completed writes to stable storage, unless the policy is
// FsyncNever. The mover calls it once per batch under FsyncBatch.
func (s *Store) Sync() error {
	if s.fsync == FsyncNever {
		return nil
	}
	s.io.RLock()
	defer s.io.RUnlock()
	if s.closed {
		return fmt.Errorf("disk sync: %w", pool.ErrClosed)
	}
	if err := unix.Fdatasync(int(s.f.Fd())); err != nil {
		return fmt.Errorf("disk sync %s: %w", s.path, err)
	}
	return nil
}

// Close syncs (per policy), unlocks and closes the page file.
func (s *Store) Close() error {
	syncErr := s.Sync()
	if errors.Is(syncErr, pool.ErrClosed) {
		return nil
	}
	s.io.Lock()
	defer s.io.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := errors.Join(syncErr, s.f.Close()); err != nil {
		return fmt.Errorf("disk close %s: %w", s.path, err)
	}
	return nil
}

var _ pool.Store = (*Store)(nil)
