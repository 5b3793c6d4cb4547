package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

var ctx = context.Background()

func testLayout(model string) *layout.Layout {
	l := layout.MHA(model, 4, layout.BF16, 2, 2, 16, 16, layout.HalfSplit)
	return &l
}

// page returns a page whose first 8 bytes are seed and the rest derived
// from it, so a reader can tell which write it got and that it is whole.
func page(pb int, seed uint64) []byte {
	p := make([]byte, pb)
	binary.LittleEndian.PutUint64(p, seed)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := 8; i < pb; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return p
}

func open(t testing.TB, dir string, l *layout.Layout, pages int) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, Layout: l, Pages: pages, Fsync: FsyncBatch})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPutGetRestart(t *testing.T) {
	dir := t.TempDir()
	l := testLayout("m")
	s := open(t, dir, l, 16)
	pb := l.PageBytes()
	keys := []pool.Key{{Seq: 1}, {Namespace: "tenant-a", Seq: 2}, {Namespace: "tenant-b", Seq: 2}}
	for i, k := range keys {
		if err := s.Put(ctx, pool.Entry{Key: k}, page(pb, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Replacing a key keeps one copy.
	if err := s.Put(ctx, pool.Entry{Key: keys[0]}, page(pb, 10)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Used != 3 {
		t.Fatalf("used %d after 3 keys", st.Used)
	}
	if err := s.Delete(ctx, keys[2]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, l, 16)
	defer s.Close()
	got := make([]byte, pb)
	for i, want := range []uint64{10, 1} {
		if err := s.Get(ctx, keys[i], got); err != nil {
			t.Fatalf("after restart, %v: %v", keys[i], err)
		}
		if !bytes.Equal(got, page(pb, want)) {
			t.Fatalf("after restart, %v holds other bytes", keys[i])
		}
	}
	if err := s.Get(ctx, keys[2], got); !errors.Is(err, pool.ErrNotFound) {
		t.Fatalf("deleted key after restart: %v", err)
	}
	ks, _ := s.List(ctx)
	if len(ks) != 2 {
		t.Fatalf("keys after restart: %v", ks)
	}
	if st := s.Stats(); st.Used != 2 || st.Corrupt != 0 {
		t.Fatalf("stats after restart: %+v", st)
	}
}

func TestEntryMetadataSurvives(t *testing.T) {
	dir := t.TempDir()
	l := testLayout("m")
	s := open(t, dir, l, 4)
	want := []pool.Entry{
		{Key: pool.Key{Namespace: "ns", Seq: 10}, Local: 10},
		{Key: pool.Key{Namespace: "ns", Seq: 11}, Local: 3, Parent: 10, HasParent: true},
	}
	for i, e := range want {
		if err := s.Put(ctx, e, page(l.PageBytes(), uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = open(t, dir, l, 4)
	defer s.Close()
	for _, e := range want {
		got, err := s.Stat(ctx, e.Key)
		if err != nil || got != e {
			t.Fatalf("entry after restart: %+v, %v; want %+v", got, err, e)
		}
	}
}

func TestLockedByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, testLayout("m"), 4)
	defer s.Close()
	if _, err := Open(Options{Dir: dir, Layout: testLayout("m"), Pages: 4}); err == nil {
		t.Fatal("a second store opened the same page file")
	}
	// Another layout is another file.
	o := open(t, dir, testLayout("other"), 4)
	o.Close()
}

func TestCorruptPayloadRefused(t *testing.T) {
	dir := t.TempDir()
	l := testLayout("m")
	pb := l.PageBytes()
	s := open(t, dir, l, 4)
	k := pool.Key{Namespace: "ns", Seq: 42}
	if err := s.Put(ctx, pool.Entry{Key: k}, page(pb, 7)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 43}}, page(pb, 8)); err != nil {
		t.Fatal(err)
	}
	flipByte(t, s.Path(), 100) // inside slot 0's payload
	got := make([]byte, pb)
	err := s.Get(ctx, k, got)
	if !errors.Is(err, pool.ErrCorrupt) {
		t.Fatalf("corrupt page served: %v", err)
	}
	if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrNotFound) {
		t.Fatalf("corrupt page not dropped: %v", err)
	}
	if st := s.Stats(); st.Corrupt != 1 || st.Used != 1 {
		t.Fatalf("stats after corruption: %+v", st)
	}
	if err := s.Get(ctx, pool.Key{Seq: 43}, got); err != nil || !bytes.Equal(got, page(pb, 8)) {
		t.Fatalf("healthy neighbour: %v", err)
	}
	s.Close()
	// The drop was persisted: the record does not come back.
	s = open(t, dir, l, 4)
	defer s.Close()
	if _, err := s.Stat(ctx, k); !errors.Is(err, pool.ErrNotFound) {
		t.Fatal("dropped page came back after restart")
	}
}

func TestCorruptHeaderDroppedAtStart(t *testing.T) {
	dir := t.TempDir()
	l := testLayout("m")
	pb := l.PageBytes()
	s := open(t, dir, l, 4)
	for i := range 3 {
		if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: uint64(i)}}, page(pb, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	flipByte(t, s.Path(), recordSize(pb)+int64(pb)+17) // slot 1's header
	s = open(t, dir, l, 4)
	if st := s.Stats(); st.Corrupt != 1 || st.Used != 2 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := s.Stat(ctx, pool.Key{Seq: 1}); err == nil {
		t.Fatal("record with a corrupt header indexed")
	}
	s.Close()

	// Payload corruption found at start with VerifyOnOpen.
	flipByte(t, s.Path(), 5) // slot 0's payload
	v, err := Open(Options{Dir: dir, Layout: l, Pages: 4, VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if st := v.Stats(); st.Corrupt != 1 || st.Used != 1 {
		t.Fatalf("verify on open: %+v", st)
	}
}

func TestForeignLayoutRefused(t *testing.T) {
	dir := t.TempDir()
	a, b := testLayout("a"), testLayout("b")
	s := open(t, dir, a, 4)
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}}, page(a.PageBytes(), 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A page file renamed under another layout's name (same page size)
	// must not be read as that layout's pages.
	if err := os.Rename(s.Path(), filepath.Join(dir, b.Fingerprint().String()+".pages")); err != nil {
		t.Fatal(err)
	}
	o := open(t, dir, b, 4)
	defer o.Close()
	if st := o.Stats(); st.Used != 0 || st.Corrupt != 1 {
		t.Fatalf("foreign records: %+v", st)
	}
}

// TestDuplicateKeyNewestWins simulates a crash between writing a page's new
// copy and tombstoning its old one.
func TestDuplicateKeyNewestWins(t *testing.T) {
	dir := t.TempDir()
	l := testLayout("m")
	pb := l.PageBytes()
	s := open(t, dir, l, 4)
	k := pool.Key{Seq: 9}
	s.Put(ctx, pool.Entry{Key: k}, page(pb, 1)) // slot 0
	s.Put(ctx, pool.Entry{Key: k}, page(pb, 2)) // slot 1; slot 0 tombstoned
	s.Close()
	f, err := os.OpenFile(s.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(magic), int64(pb)); err != nil { // resurrect slot 0's header
		t.Fatal(err)
	}
	f.Close()
	s = open(t, dir, l, 4)
	defer s.Close()
	got := make([]byte, pb)
	if err := s.Get(ctx, k, got); err != nil || !bytes.Equal(got, page(pb, 2)) {
		t.Fatalf("newest copy not chosen: %v", err)
	}
	if st := s.Stats(); st.Used != 1 {
		t.Fatalf("stale copy kept: %+v", st)
	}
}

func TestErrors(t *testing.T) {
	l := testLayout("m")
	pb := l.PageBytes()
	s := open(t, t.TempDir(), l, 1)
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}}, page(pb, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 2}}, page(pb, 2)); !errors.Is(err, pool.ErrFull) {
		t.Fatalf("full store: %v", err)
	}
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 2}}, make([]byte, 3)); !errors.Is(err, pool.ErrPageSize) {
		t.Fatalf("short page: %v", err)
	}
	long := pool.Key{Namespace: string(make([]byte, pool.MaxNamespace+1))}
	if err := s.Put(ctx, pool.Entry{Key: long}, page(pb, 1)); !errors.Is(err, pool.ErrKey) {
		t.Fatalf("long namespace: %v", err)
	}
	if err := s.Delete(ctx, pool.Key{Seq: 77}); err != nil {
		t.Fatalf("delete of absent key: %v", err)
	}
	s.Close()
	if err := s.Get(ctx, pool.Key{Seq: 1}, make([]byte, pb)); !errors.Is(err, pool.ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if _, err := Open(Options{Dir: t.TempDir(), Layout: l, Pages: 0}); err == nil {
		t.Fatal("zero pages accepted")
	}
	if _, err := ParseFsyncPolicy("sometimes"); err == nil {
		t.Fatal("bad fsync policy accepted")
	}
}

// TestConcurrent runs puts, gets and deletes over a few shared keys. Every
// successful Get must return a whole page some Put wrote under that key.
func TestConcurrent(t *testing.T) {
	l := testLayout("m")
	pb := l.PageBytes()
	s := open(t, t.TempDir(), l, 64)
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			got := make([]byte, pb)
			for i := range 300 {
				k := pool.Key{Seq: uint64(r.IntN(8))}
				switch r.IntN(3) {
				case 0:
					// Seeds encode the key, so a reader can check it.
					if err := s.Put(ctx, pool.Entry{Key: k}, page(pb, k.Seq<<32|uint64(g<<16|i))); err != nil {
						t.Error(err)
						return
					}
				case 1:
					err := s.Get(ctx, k, got)
					if errors.Is(err, pool.ErrNotFound) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					seed := binary.LittleEndian.Uint64(got)
					if seed>>32 != k.Seq || !bytes.Equal(got, page(pb, seed)) {
						t.Errorf("key %v returned a torn or foreign page (seed %x)", k, seed)
						return
					}
				case 2:
					if err := s.Delete(ctx, k); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	ks, _ := s.List(ctx)
	if st := s.Stats(); int(st.Used) != len(ks) || st.Corrupt != 0 {
		t.Fatalf("accounting: %+v with %d keys", st, len(ks))
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(fmt.Errorf("flip byte at %d: %w", off, err))
	}
}
