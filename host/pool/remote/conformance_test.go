package remote

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/remote/redistest"
)

// backendCase is one backend under the conformance suite: a keyspace that
// several Stores (hosts) share, and a way to damage a stored page behind
// the Store's back.
type backendCase struct {
	name string
	// setup starts the backend's server and returns an opener of Stores
	// on one shared keyspace, and tamper, which replaces the bytes of the
	// object called name while keeping its metadata.
	setup func(t testing.TB, ctx context.Context) (open func(*layout.Layout) *Store, tamper func(name string, page []byte))
}

func backendCases() []backendCase {
	return []backendCase{
		{name: "jetstream", setup: func(t testing.TB, ctx context.Context) (func(*layout.Layout) *Store, func(string, []byte)) {
			n := startNATS(t, t.TempDir())
			js, err := n.JetStream()
			if err != nil {
				t.Fatal(err)
			}
			open := func(l *layout.Layout) *Store {
				s := openStore(t, ctx, js, l)
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			tamper := func(name string, page []byte) {
				obs, err := js.ObjectStore(ctx, "pages")
				if err != nil {
					t.Fatal(err)
				}
				info, err := obs.GetInfo(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				// A fresh put: JetStream's own digest matches the new
				// bytes, so only the Store's checksum can catch it.
				if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Headers: nats.Header(info.Headers)}, bytes.NewReader(page)); err != nil {
					t.Fatal(err)
				}
			}
			return open, tamper
		}},
		{name: "redis", setup: func(t testing.TB, ctx context.Context) (func(*layout.Layout) *Store, func(string, []byte)) {
			addr := redistest.Server(t)
			open := func(l *layout.Layout) *Store {
				be, err := NewRedis(RedisOptions{Addrs: []string{addr}, Bucket: "pages"})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Open(ctx, Options{Backend: be, Layout: l})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			tamper := func(name string, page []byte) {
				if err := c.Set(ctx, "kvpilot:pages:{"+name+pageSuffix, page, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			return open, tamper
		}},
	}
}

// TestConformance holds every backend to the same behaviour through the
// Store: what one host puts another reads byte-identical, with its tree
// links; absent pages are pool.ErrNotFound; a page whose bytes no longer
// match its checksum is dropped, never served; bad input, a cancelled
// context and a closed store are refused with the pool's errors.
func TestConformance(t *testing.T) {
	for _, bc := range backendCases() {
		t.Run(bc.name, func(t *testing.T) {
			ctx := ctxT(t)
			open, tamper := bc.setup(t, ctx)
			l := testLayout("m")
			pb := l.PageBytes()
			a, b := open(l), open(l)

			root := pool.Entry{Key: pool.Key{Namespace: "t/x y%", Seq: 99}, Local: 99}
			child := pool.Entry{Key: pool.Key{Namespace: "t/x y%", Seq: 100}, Local: 5, Parent: 99, HasParent: true}
			bare := pool.Entry{Key: pool.Key{Seq: ^uint64(0)}, Local: 1}
			entries := []pool.Entry{root, child, bare}
			for i, e := range entries {
				if err := a.Put(ctx, e, page(pb, byte(i))); err != nil {
					t.Fatalf("put %v: %v", e.Key, err)
				}
			}
			// Another layout in the same keyspace is invisible to this one.
			other := open(testLayout("other"))
			if err := other.Put(ctx, root, page(pb, 200)); err != nil {
				t.Fatal(err)
			}

			t.Run("shared", func(t *testing.T) {
				got := make([]byte, pb)
				for i, e := range entries {
					if st, err := b.Stat(ctx, e.Key); err != nil || st != e {
						t.Fatalf("stat %v from the second host: %+v %v", e.Key, st, err)
					}
					if err := b.Get(ctx, e.Key, got); err != nil || !bytes.Equal(got, page(pb, byte(i))) {
						t.Fatalf("get %v from the second host: %v (bytes equal %v)", e.Key, err, bytes.Equal(got, page(pb, byte(i))))
					}
				}
				es, err := b.List(ctx)
				if err != nil || len(es) != len(entries) {
					t.Fatalf("list: %v %v", es, err)
				}
				for _, e := range entries {
					found := false
					for _, g := range es {
						found = found || g == e
					}
					if !found {
						t.Fatalf("list lacks %+v: %+v", e, es)
					}
				}
				if st := b.Stats(); st.Used != int64(len(entries)) || st.PageBytes != pb {
					t.Fatalf("stats after list: %+v", st)
				}
			})

			t.Run("replace", func(t *testing.T) {
				e := pool.Entry{Key: child.Key, Local: 6}
				if err := a.Put(ctx, e, page(pb, 7)); err != nil {
					t.Fatal(err)
				}
				if st, err := b.Stat(ctx, child.Key); err != nil || st != e {
					t.Fatalf("replaced page: %+v %v", st, err)
				}
				got := make([]byte, pb)
				if err := b.Get(ctx, child.Key, got); err != nil || !bytes.Equal(got, page(pb, 7)) {
					t.Fatalf("replaced page's bytes: %v", err)
				}
			})

			t.Run("not found", func(t *testing.T) {
				absent := pool.Key{Namespace: "nobody", Seq: 1}
				if err := b.Get(ctx, absent, make([]byte, pb)); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("get absent: %v", err)
				}
				if _, err := b.Stat(ctx, absent); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("stat absent: %v", err)
				}
				if err := b.Delete(ctx, absent); err != nil {
					t.Fatalf("delete absent: %v", err)
				}
			})

			t.Run("checksum mismatch drops the page", func(t *testing.T) {
				bad := page(pb, 0)
				bad[pb/2] ^= 0x40
				tamper(ObjectName(l.Fingerprint(), root.Key), bad)
				before := b.Stats().Corrupt
				got := make([]byte, pb)
				if err := b.Get(ctx, root.Key, got); !errors.Is(err, pool.ErrCorrupt) {
					t.Fatalf("tampered page served: %v", err)
				}
				if n := b.Stats().Corrupt - before; n != 1 {
					t.Fatalf("corrupt count grew by %d", n)
				}
				if err := a.Get(ctx, root.Key, got); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("tampered page not dropped: %v", err)
				}
				if _, err := a.Stat(ctx, root.Key); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("tampered page still listed: %v", err)
				}
			})

			t.Run("delete", func(t *testing.T) {
				if err := b.Delete(ctx, bare.Key); err != nil {
					t.Fatal(err)
				}
				if err := a.Get(ctx, bare.Key, make([]byte, pb)); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("deleted page: %v", err)
				}
				es, err := a.List(ctx)
				if err != nil || len(es) != 1 || es[0].Key != child.Key {
					t.Fatalf("list after deletes: %+v %v", es, err)
				}
			})

			t.Run("bad input", func(t *testing.T) {
				if err := a.Put(ctx, root, make([]byte, pb-1)); !errors.Is(err, pool.ErrPageSize) {
					t.Fatalf("short page: %v", err)
				}
				if err := a.Get(ctx, child.Key, make([]byte, pb+1)); !errors.Is(err, pool.ErrPageSize) {
					t.Fatalf("long buffer: %v", err)
				}
				long := pool.Entry{Key: pool.Key{Namespace: strings.Repeat("n", pool.MaxNamespace+1), Seq: 1}}
				if err := a.Put(ctx, long, page(pb, 1)); !errors.Is(err, pool.ErrKey) {
					t.Fatalf("long namespace: %v", err)
				}
			})

			t.Run("cancelled context", func(t *testing.T) {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				k := pool.Key{Seq: 4242}
				if err := a.Put(cctx, pool.Entry{Key: k}, page(pb, 4)); !errors.Is(err, context.Canceled) {
					t.Fatalf("put: %v", err)
				}
				if err := a.Get(cctx, child.Key, make([]byte, pb)); !errors.Is(err, context.Canceled) {
					t.Fatalf("get: %v", err)
				}
				if _, err := a.Stat(cctx, child.Key); !errors.Is(err, context.Canceled) {
					t.Fatalf("stat: %v", err)
				}
				if _, err := a.List(cctx); !errors.Is(err, context.Canceled) {
					t.Fatalf("list: %v", err)
				}
				if err := a.Delete(cctx, child.Key); !errors.Is(err, context.Canceled) {
					t.Fatalf("delete: %v", err)
				}
				// Nothing was done, and the page a cancelled Get asked
				// for is not taken for damaged.
				if _, err := a.Stat(ctx, k); !errors.Is(err, pool.ErrNotFound) {
					t.Fatalf("cancelled put stored a page: %v", err)
				}
				if err := a.Get(ctx, child.Key, make([]byte, pb)); err != nil {
					t.Fatalf("get after cancelled calls: %v", err)
				}
			})

			t.Run("closed", func(t *testing.T) {
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
				if err := a.Close(); err != nil {
					t.Fatalf("second close: %v", err)
				}
				if err := a.Put(ctx, child, page(pb, 1)); !errors.Is(err, pool.ErrClosed) {
					t.Fatalf("put: %v", err)
				}
				if err := a.Get(ctx, child.Key, make([]byte, pb)); !errors.Is(err, pool.ErrClosed) {
					t.Fatalf("get: %v", err)
				}
				if _, err := a.Stat(ctx, child.Key); !errors.Is(err, pool.ErrClosed) {
					t.Fatalf("stat: %v", err)
				}
				if _, err := a.List(ctx); !errors.Is(err, pool.ErrClosed) {
					t.Fatalf("list: %v", err)
				}
				if err := a.Delete(ctx, child.Key); !errors.Is(err, pool.ErrClosed) {
					t.Fatalf("delete: %v", err)
				}
				// The other host is unaffected.
				if err := b.Get(ctx, child.Key, make([]byte, pb)); err != nil {
					t.Fatalf("second host after the first closed: %v", err)
				}
			})
		})
	}
}

// TestConformanceLargePages runs the checksum paths that only pages past
// inlineSum take (hashed beside the send, and beside the copy on a read):
// a page comes back whole, and a page changed in any part is dropped.
func TestConformanceLargePages(t *testing.T) {
	for _, bc := range backendCases() {
		t.Run(bc.name, func(t *testing.T) {
			ctx := ctxT(t)
			open, tamper := bc.setup(t, ctx)
			l := layout.MHA("large", 16, layout.BF16, 4, 4, 64, 64, layout.HalfSplit)
			pb := l.PageBytes()
			if pb < inlineSum {
				t.Fatalf("page of %d bytes is hashed inline", pb)
			}
			a, b := open(&l), open(&l)
			for i, at := range []int{0, pb / 2, pb - 1} {
				k := pool.Entry{Key: pool.Key{Namespace: "large", Seq: uint64(i)}}
				want := page(pb, byte(i))
				if err := a.Put(ctx, k, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, pb)
				if err := b.Get(ctx, k.Key, got); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("page %d read back: %v", i, err)
				}
				bad := bytes.Clone(want)
				bad[at] ^= 0x01
				tamper(ObjectName(l.Fingerprint(), k.Key), bad)
				if err := b.Get(ctx, k.Key, got); !errors.Is(err, pool.ErrCorrupt) {
					t.Fatalf("byte %d changed: served (%v)", at, err)
				}
			}
		})
	}
}
