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

	"github.com/redis/go-redis/v9"

	"github.com/kvpilot/kvpilot/host/freeport"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/pool/remote"
)

// The remote arms: each backend of the remote tier beside its own raw
// baseline in the same run, the same bytes through the same server and
// client: JetStream object put and get on the embedded server, Redis SET
// and GET; and S3, raw alone (s3arms.go).

// remoteStore is one remote store of the run: the arms of its raw put and
// get and, when the remote tier has a backend on it, the backend's.
type remoteStore struct {
	name string
	// The arms' names, as the JSON has them.
	rawPut, rawGet, put, get string
	raw                      func(put bool) func(n int) error
	backend                  *remote.Store // nil: a candidate, measured raw
}

// openJetStream starts the embedded NATS server with its data in dir and
// opens the remote tier's backend and the raw baseline's bucket on it.
func (f *Fixture) openJetStream(dir string) error {
	n, err := natsembed.Start(natsembed.Options{DataDir: dir})
	if err != nil {
		return err
	}
	f.onClose(func() { n.Close() })
	js, err := n.JetStream()
	if err != nil {
		return err
	}
	if f.remote, err = remote.Open(context.Background(), remote.Options{JS: js, Layout: f.lay, Bucket: "kvpilot-bench"}); err != nil {
		return err
	}
	f.onClose(func() { f.remote.Close() })
	obs, err := js.ObjectStore(context.Background(), "kvpilot-bench")
	if err != nil {
		return err
	}
	// The raw arms put plain objects of the bench bucket and get them back.
	f.stores = append(f.stores, remoteStore{"jetstream", "jetstream_raw_put", "jetstream_raw_get", "host_to_remote", "remote_to_host",
		f.rawArm("raw/", func(ctx context.Context, name string, page []byte) error {
			_, err := obs.PutBytes(ctx, name, page)
			return err
		}, func(ctx context.Context, name string) ([]byte, error) { return obs.GetBytes(ctx, name) }), f.remote})
	return nil
}

// rawArm is a raw arm: n host pages put with putFn under prefix and their
// number, or got back with getFn.
func (f *Fixture) rawArm(prefix string, putFn func(context.Context, string, []byte) error, getFn func(context.Context, string) ([]byte, error)) func(put bool) func(n int) error {
	ctx := context.Background()
	return func(put bool) func(n int) error {
		return onCores(1, func(i int) error {
			name := prefix + strconv.Itoa(i%f.pages)
			if put {
				return putFn(ctx, name, f.hostView(i))
			}
			b, err := getFn(ctx, name)
			copy(f.hostView(i), b)
			return err
		})
	}
}

// openRedis binds the Redis arms to addr; "auto" starts a redis-server
// of its own under dir when one is on PATH, and "" or "off" skips them.
func (f *Fixture) openRedis(dir, addr string) error {
	addr, err := serverAddr(addr, "redis-server", filepath.Join(dir, "redis"), 1, f.startRedis)
	if addr == "" || err != nil {
		return err
	}
	be, err := remote.NewRedis(remote.RedisOptions{Addrs: []string{addr}, Bucket: "kvpilot-bench"})
	if err != nil {
		return err
	}
	backend, err := remote.Open(context.Background(), remote.Options{Backend: be, Layout: f.lay})
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	f.onClose(func() { backend.Close() })
	rc := redis.NewClient(&redis.Options{Addr: addr})
	f.onClose(func() { rc.Close() })
	// The raw arms set plain strings and get them back.
	f.stores = append(f.stores, remoteStore{"redis", "redis_raw_set", "redis_raw_get", "host_to_redis", "redis_to_host",
		f.rawArm("kvpilot-bench-raw:", func(ctx context.Context, key string, page []byte) error {
			return rc.Set(ctx, key, page, 0).Err()
		}, func(ctx context.Context, key string) ([]byte, error) { return rc.Get(ctx, key).Bytes() }), backend})
	return nil
}

// serverAddr resolves an arm's server flag: "" or "off" skip the arms
// (""), "auto" starts a server with start, in dir on n free ports, when
// bin is on PATH (and skips them when it is not), anything else is the
// server's address.
func serverAddr(flag, bin, dir string, n int, start func(dir string, ports []int) (string, error)) (string, error) {
	switch flag {
	case "", "off":
		return "", nil
	case "auto":
		if _, err := exec.LookPath(bin); err != nil {
			return "", nil
		}
		ports, err := freeport.Ports(n)
		if err == nil {
			err = os.MkdirAll(dir, 0o700)
		}
		if err != nil {
			return "", err
		}
		return start(dir, ports)
	}
	return flag, nil
}

// startRedis runs a throwaway redis-server (no persistence) on a loopback
// port.
func (f *Fixture) startRedis(rdir string, ports []int) (string, error) {
	port := strconv.Itoa(ports[0])
	if err := f.startServer(exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", rdir,
		"--save", "", "--appendonly", "no", "--proto-max-bulk-len", "64mb")); err != nil {
		return "", err
	}
	addr := "127.0.0.1:" + port
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

// startServer starts a server process for the run; Close stops it
// (SIGTERM, then SIGKILL after 10 s).
func (f *Fixture) startServer(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	f.onClose(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return nil
}
