package remote

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/pool"
)

func testLayout(model string) *layout.Layout {
	l := layout.MHA(model, 4, layout.FP16, 2, 2, 32, 32, layout.HalfSplit)
	return &l
}

func page(pb int, seed byte) []byte {
	p := make([]byte, pb)
	for i := range p {
		p[i] = seed ^ byte(i*31+i>>8)
	}
	return p
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startNATS(t testing.TB, dir string) *natsembed.NATS {
	t.Helper()
	n, err := natsembed.Start(natsembed.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func openStore(t testing.TB, ctx context.Context, js jetstream.JetStream, l *layout.Layout) *Store {
	t.Helper()
	s, err := Open(ctx, Options{JS: js, Layout: l, Bucket: "pages"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestObjectNames(t *testing.T) {
	fp := testLayout("m").Fingerprint()
	for _, k := range []pool.Key{{Seq: 0}, {Seq: ^uint64(0)}, {Namespace: "a/b=c d%", Seq: 7}, {Namespace: "=", Seq: 1}} {
		name := ObjectName(fp, k)
		got, ok := parseName(fp.String()+"/", name)
		if !ok || got != k {
			t.Fatalf("%v -> %q -> %v %v", k, name, got, ok)
		}
	}
	if _, ok := parseName(fp.String()+"/", "0000000000000000/=x/1"); ok {
		t.Fatal("name of another layout parsed")
	}
}

// TestSharedBucket writes through one host and reads through a second
// client of the same bucket, then restarts the server on its data dir.
func TestSharedBucket(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	n := startNATS(t, dir)
	js, _ := n.JetStream()
	l := testLayout("m")
	pb := l.PageBytes()
	a := openStore(t, ctx, js, l)
	keys := []pool.Key{{Seq: 1}, {Namespace: "tenant/x", Seq: 1}, {Namespace: "t", Seq: 99}}
	for i, k := range keys {
		if err := a.Put(ctx, pool.Entry{Key: k}, page(pb, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Another layout in the same bucket is invisible to this one.
	other := openStore(t, ctx, js, testLayout("other"))
	if err := other.Put(ctx, pool.Entry{Key: keys[0]}, page(pb, 200)); err != nil {
		t.Fatal(err)
	}

	// Entries carry the tree links another host needs.
	child := pool.Entry{Key: pool.Key{Namespace: "t", Seq: 100}, Local: 5, Parent: 99, HasParent: true}
	if err := a.Put(ctx, child, page(pb, 9)); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Stat(ctx, child.Key); err != nil || got != child {
		t.Fatalf("stat: %+v %v", got, err)
	}
	if err := a.Delete(ctx, child.Key); err != nil {
		t.Fatal(err)
	}

	c2, err := n.Connect("host-2")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	js2, _ := jetstream.New(c2)
	b := openStore(t, ctx, js2, l)
	if st := b.Stats(); st.Used != 3 {
		t.Fatalf("second host counts %d pages", st.Used)
	}
	got := make([]byte, pb)
	for i, k := range keys {
		if err := b.Get(ctx, k, got); err != nil {
			t.Fatalf("second host get %v: %v", k, err)
		}
		if !bytes.Equal(got, page(pb, byte(i))) {
			t.Fatalf("second host read other bytes for %v", k)
		}
	}
	if err := b.Delete(ctx, keys[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stat(ctx, keys[2]); !errors.Is(err, pool.ErrNotFound) {
		t.Fatal("delete by one host not seen by the other")
	}
	if err := a.Get(ctx, keys[2], got); !errors.Is(err, pool.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if err := b.Delete(ctx, keys[2]); err != nil {
		t.Fatalf("delete absent: %v", err)
	}

	c2.Close()
	n.Close()
	n = startNATS(t, dir)
	js, _ = n.JetStream()
	a = openStore(t, ctx, js, l)
	ks, err := a.List(ctx)
	if err != nil || len(ks) != 2 {
		t.Fatalf("after restart keys %v, %v", ks, err)
	}
	if err := a.Get(ctx, keys[1], got); err != nil || !bytes.Equal(got, page(pb, 1)) {
		t.Fatalf("after restart: %v", err)
	}
}

// TestCorruptObjectRefused plants objects whose size or headers disagree
// with their name; they must be refused and removed.
func TestCorruptObjectRefused(t *testing.T) {
	ctx := ctxT(t)
	n := startNATS(t, t.TempDir())
	js, _ := n.JetStream()
	l := testLayout("m")
	pb := l.PageBytes()
	s := openStore(t, ctx, js, l)
	obs, err := js.ObjectStore(ctx, "pages")
	if err != nil {
		t.Fatal(err)
	}
	short := pool.Key{Seq: 5}
	if _, err := obs.PutBytes(ctx, ObjectName(l.Fingerprint(), short), make([]byte, pb-1)); err != nil {
		t.Fatal(err)
	}
	noHeaders := pool.Key{Seq: 6}
	if _, err := obs.PutBytes(ctx, ObjectName(l.Fingerprint(), noHeaders), make([]byte, pb)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, pb)
	for _, k := range []pool.Key{short, noHeaders} {
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrCorrupt) {
			t.Fatalf("%v: corrupt object served: %v", k, err)
		}
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrNotFound) {
			t.Fatalf("%v: corrupt object not dropped: %v", k, err)
		}
	}
	if st := s.Stats(); st.Corrupt != 2 {
		t.Fatalf("corrupt count %d", st.Corrupt)
	}
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}}, make([]byte, 1)); !errors.Is(err, pool.ErrPageSize) {
		t.Fatalf("short page: %v", err)
	}
	s.Close()
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}}, page(pb, 1)); !errors.Is(err, pool.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}
