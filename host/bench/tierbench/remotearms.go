package tierbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/kvpilot/kvpilot/host/freeport"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/remote"
)

// The remote arms: each backend of the remote tier beside its own raw
// baseline in the same run, the same bytes through the same server and
// client: JetStream object put and get on the embedded server, Redis SET
// and GET.

// rawJetStream puts n host pages as plain objects of the bench bucket.
func (f *Fixture) rawJetStream(put bool) func(n int) error {
	return func(n int) error {
		ctx := context.Background()
		for i := range n {
			name := "raw/" + strconv.Itoa(i%f.pages)
			if put {
				if _, err := f.rawObs.PutBytes(ctx, name, f.hostView(i)); err != nil {
					return err
				}
				continue
			}
			b, err := f.rawObs.GetBytes(ctx, name)
			if err != nil {
				return err
			}
			copy(f.hostView(i), b)
		}
		return nil
	}
}

// rawRedis sets or gets n host pages as plain strings.
func (f *Fixture) rawRedis(set bool) func(n int) error {
	return func(n int) error {
		ctx := context.Background()
		for i := range n {
			key := "kvpilot-bench-raw:" + strconv.Itoa(i%f.pages)
			if set {
				if err := f.rc.Set(ctx, key, f.hostView(i), 0).Err(); err != nil {
					return err
				}
				continue
			}
			b, err := f.rc.Get(ctx, key).Bytes()
			if err != nil {
				return err
			}
			copy(f.hostView(i), b)
		}
		return nil
	}
}

// storeArm puts n host pages in s, or gets them back.
func (f *Fixture) storeArm(s *remote.Store, put bool) func(n int) error {
	return func(n int) error {
		ctx := context.Background()
		for i := range n {
			k := pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}
			var err error
			if put {
				err = s.Put(ctx, pool.Entry{Key: k, Local: uint64(i)}, f.hostView(i))
			} else {
				err = s.Get(ctx, k, f.hostView(i))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

func (f *Fixture) openRawJetStream(js jetstream.JetStream) (err error) {
	f.rawObs, err = js.ObjectStore(context.Background(), "kvpilot-bench")
	return err
}

// openRedis binds the Redis arms to addr; "auto" starts a redis-server
// of its own under dir when one is on PATH, and "" or "off" skips them.
func (f *Fixture) openRedis(dir, addr string) error {
	addr, err := serverAddr(addr, "redis-server", func() (string, error) { return f.startRedis(dir) })
	if addr == "" || err != nil {
		return err
	}
	be, err := remote.NewRedis(remote.RedisOptions{Addrs: []string{addr}, Bucket: "kvpilot-bench"})
	if err != nil {
		return err
	}
	if f.redis, err = remote.Open(context.Background(), remote.Options{Backend: be, Layout: f.lay}); err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	f.rc = redis.NewClient(&redis.Options{Addr: addr})
	return nil
}

// serverAddr resolves an arm's server flag: "" or "off" skip the arms
// (""), "auto" starts a server with start when bin is on PATH (and skips
// them when it is not), anything else is the server's address.
func serverAddr(flag, bin string, start func() (string, error)) (string, error) {
	switch flag {
	case "", "off":
		return "", nil
	case "auto":
		if _, err := exec.LookPath(bin); err != nil {
			return "", nil
		}
		return start()
	}
	return flag, nil
}

// startRedis runs a throwaway redis-server (no persistence) on a free
// loopback port.
func (f *Fixture) startRedis(dir string) (string, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return "", err
	}
	port := ports[0]
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o700); err != nil {
		return "", err
	}
	f.redisProc = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", rdir,
		"--save", "", "--appendonly", "no", "--proto-max-bulk-len", "64mb")
	if err := f.redisProc.Start(); err != nil {
		return "", fmt.Errorf("start redis-server: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *Fixture) closeRedis() {
	if f.redis != nil {
		f.redis.Close()
	}
	if f.rc != nil {
		f.rc.Close()
	}
	if f.redisProc != nil && f.redisProc.Process != nil {
		_ = f.redisProc.Process.Signal(syscall.SIGTERM)
		_ = f.redisProc.Wait()
	}
}
