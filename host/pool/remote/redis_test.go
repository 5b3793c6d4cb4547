package remote

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/remote/redistest"
)

func openRedis(t *testing.T, ctx context.Context, o RedisOptions) *Store {
	t.Helper()
	be, err := NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Options{Backend: be, Layout: testLayout("m")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A Redis cluster of three primaries with a replica each keeps every page
// through the loss of a primary: its replica takes over.
func TestRedisClusterSurvivesAPrimaryLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a six-node redis cluster; run without -short")
	}
	cl := redistest.StartCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openRedis(t, ctx, RedisOptions{Addrs: cl.Addrs(), Bucket: "pages"})
	pb := s.Layout().PageBytes()
	const n = 24
	for i := range n {
		if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: uint64(i + 1)}, Local: uint64(i + 1)}, page(pb, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	cl.KillPrimary(t, 30*time.Second)
	got := make([]byte, pb)
	for i := range n {
		k := pool.Key{Seq: uint64(i + 1)}
		var err error
		for try := 0; try < 20; try++ {
			gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
			err = s.Get(gctx, k, got)
			gcancel()
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || !bytes.Equal(got, page(pb, byte(i))) {
			t.Fatalf("page %d after a primary's loss: %v", i+1, err)
		}
	}
}

// A server that requires a password refuses the backend without it, and
// serves it with it.
func TestRedisPassword(t *testing.T) {
	redistest.Require(t)
	addr := redistest.ServerArgs(t, "--requirepass", "s3cret")
	ctx := ctxT(t)
	be, err := NewRedis(RedisOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	// Refused at once, not retried as an unanswering cluster would be.
	if _, err := Open(ctx, Options{Backend: be, Layout: testLayout("m")}); !errors.Is(err, errRefused) {
		t.Fatalf("without the password: %v", err)
	}
	s := openRedis(t, ctx, RedisOptions{Addrs: []string{addr}, Password: "s3cret"})
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}, Local: 1}, page(s.Layout().PageBytes(), 3)); err != nil {
		t.Fatal(err)
	}
}

// An object missing one of its two keys (written by hand, or half lost
// with a node) is dropped, never served: a page without its metadata has
// no checksum, and metadata without a page has nothing to serve.
func TestRedisHalfObjectsDropped(t *testing.T) {
	addr := redistest.Server(t)
	ctx := ctxT(t)
	s := openRedis(t, ctx, RedisOptions{Addrs: []string{addr}, Bucket: "pages"})
	pb := s.Layout().PageBytes()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	be := s.Backend().(*redisBackend)
	noMeta, noPage := pool.Key{Seq: 1}, pool.Key{Seq: 2}
	for _, k := range []pool.Key{noMeta, noPage} {
		if err := s.Put(ctx, pool.Entry{Key: k, Local: k.Seq}, page(pb, byte(k.Seq))); err != nil {
			t.Fatal(err)
		}
	}
	_, mk := be.keys(ObjectName(s.fp, noMeta))
	pk, _ := be.keys(ObjectName(s.fp, noPage))
	if err := c.Del(ctx, mk, pk).Err(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, pb)
	for _, k := range []pool.Key{noMeta, noPage} {
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrCorrupt) {
			t.Fatalf("%v: half an object served: %v", k, err)
		}
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrNotFound) {
			t.Fatalf("%v: half an object not dropped: %v", k, err)
		}
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("keys left behind: %d %v", n, err)
	}
}
