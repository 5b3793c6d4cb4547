package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/remote/redistest"
	"github.com/kvpilot/kvpilot/host/syncbuf"
)

const fellBack = "goes through the client"

// openLogged opens a Redis store of 1 MiB pages whose backend logs at
// debug level into the returned buffer.
func openLogged(t *testing.T, ctx context.Context, o RedisOptions) (*Store, *syncbuf.Buffer) {
	t.Helper()
	var logs syncbuf.Buffer
	o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &logs})
	be, err := NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	l := layout.MHA("big", 16, layout.BF16, 16, 8, 128, 128, layout.HalfSplit)
	s, err := Open(ctx, Options{Backend: be, Layout: &l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, &logs
}

// Gets take the direct path, with and without a password: pages come back
// whole, absent ones are not found, and nothing falls back to go-redis.
func TestRedisDirectGets(t *testing.T) {
	redistest.Require(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		name string
		args []string
		o    RedisOptions
	}{
		{name: "open"},
		{name: "password", args: []string{"--requirepass", "s3cret"}, o: RedisOptions{Password: "s3cret"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Addrs = []string{redistest.ServerArgs(t, c.args...)}
			s, logs := openLogged(t, ctx, c.o)
			pb := s.Layout().PageBytes()
			got := make([]byte, pb)
			for i := range 12 { // more than the idle connections kept
				e := pool.Entry{Key: pool.Key{Namespace: "direct", Seq: uint64(i)}, Local: uint64(i)}
				want := page(pb, byte(i))
				if err := s.Put(ctx, e, want); err != nil {
					t.Fatal(err)
				}
				if err := s.Get(ctx, e.Key, got); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("page %d: %v", i, err)
				}
			}
			if err := s.Get(ctx, pool.Key{Seq: 999}, got); !errors.Is(err, pool.ErrNotFound) {
				t.Fatalf("absent page: %v", err)
			}
			if strings.Contains(logs.String(), fellBack) {
				t.Fatalf("a get fell back to go-redis:\n%s", logs)
			}
		})
	}
}

// A reply the direct path does not expect (here a WRONGTYPE inside EXEC)
// sends the get through go-redis, which reports it; the connection it
// came on is not reused.
func TestRedisDirectFallsBack(t *testing.T) {
	redistest.Require(t)
	ctx := ctxT(t)
	addr := redistest.Server(t)
	s, logs := openLogged(t, ctx, RedisOptions{Addrs: []string{addr}})
	be := s.Backend().(*redisBackend)
	k := pool.Key{Seq: 5}
	pk, _ := be.keys(ObjectName(s.fp, k))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.HSet(ctx, pk, "not", "a page").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Get(ctx, k, make([]byte, s.Layout().PageBytes())); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a page key of the wrong type: %v", err)
	}
	if !strings.Contains(logs.String(), fellBack) {
		t.Fatalf("no fallback logged:\n%s", logs)
	}
	if n := len(be.direct.idle[addr]); n != 0 {
		t.Fatalf("%d connections kept after a failed reply", n)
	}
}

// FuzzRedisDirectReply feeds the direct path's reply reader any bytes a
// server could send: it never panics, and a page it accepts carries the
// checksum of exactly the bytes it put in the page.
func FuzzRedisDirectReply(f *testing.F) {
	const pb = 8
	f.Add([]byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$8\r\nabcdefgh\r\n*6\r\n$1\r\na\r\n$-1\r\n$0\r\n\r\n$1\r\nb\r\n$-1\r\n$3\r\nsum\r\n"))
	f.Add([]byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$-1\r\n*6\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n"))
	f.Add([]byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$3\r\nabc\r\n*6\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n"))
	f.Add([]byte("+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n"))
	f.Add([]byte("+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$99999999999\r\n"))
	f.Fuzz(func(t *testing.T, reply []byte) {
		c := &respConn{r: bufio.NewReader(bytes.NewReader(reply)), w: bufio.NewWriter(io.Discard)}
		dst := make([]byte, pb)
		meta, err := c.readGet(dst)
		if err != nil {
			return
		}
		if got, want := meta[metaReadSum], pageSum(dst); got != want {
			t.Fatalf("checksum %q for a page whose bytes hash to %q", got, want)
		}
	})
}
