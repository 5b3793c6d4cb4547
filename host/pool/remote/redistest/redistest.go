// Package redistest runs real redis-server processes for tests: one
// server, or a cluster of primaries with replicas made with redis-cli, so
// the remote tier's Redis backend is tested against the server teams run.
// Without redis-server on PATH the tests are skipped with a message that
// says how to install it.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/freeport"
)

// Node is one redis-server process.
type Node struct {
	Addr string
	Dir  string // its data directory, with redis.log
	cmd  *exec.Cmd
	done chan struct{}
}

// Require skips the test when redis-server or redis-cli is missing.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not on PATH (apt-get install -y redis-server)", bin)
		}
	}
}

// Server starts one redis-server and returns its address.
func Server(t testing.TB) string { return ServerArgs(t) }

// ServerArgs starts one redis-server with extra arguments (such as
// --requirepass) and returns its address.
func ServerArgs(t testing.TB, extra ...string) string {
	t.Helper()
	Require(t)
	n := start(t, t.TempDir(), false, extra...)
	return n.Addr
}

// Cluster is a running Redis cluster.
type Cluster struct {
	Nodes []*Node
}

// Addrs lists every node's address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// StartCluster starts primaries*(1+replicas) nodes and joins them into a
// cluster, waiting until every slot is served.
func StartCluster(t testing.TB, primaries, replicas int) *Cluster {
	t.Helper()
	Require(t)
	c := &Cluster{}
	for range primaries * (1 + replicas) {
		c.Nodes = append(c.Nodes, start(t, t.TempDir(), true))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	for _, n := range c.Nodes {
		waitClusterOK(t, n.Addr, 30*time.Second)
	}
	for _, n := range c.Nodes {
		waitReplicaSynced(t, n.Addr, 30*time.Second)
	}
	return c
}

// waitReplicaSynced waits until a replica's link to its primary is up
// (a primary passes at once).
func waitReplicaSynced(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, err := cli(addr, "info", "replication")
		if err == nil && (bytes.Contains(out, []byte("role:master")) || bytes.Contains(out, []byte("master_link_status:up"))) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not in sync: %s %v", addr, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill SIGKILLs node i.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// Primary reports whether node i serves slots as a primary.
func (c *Cluster) Primary(i int) bool {
	out, err := cli(c.Nodes[i].Addr, "role")
	return err == nil && strings.HasPrefix(string(out), "master")
}

// cli runs one redis-cli command against the node at addr.
func cli(addr string, args ...string) ([]byte, error) {
	return exec.Command("redis-cli", append([]string{"-u", "redis://" + addr}, args...)...).Output()
}

// node is the index of the node at addr, or -1.
func (c *Cluster) node(addr string) int {
	for i, n := range c.Nodes {
		if n.Addr == addr {
			return i
		}
	}
	return -1
}

func start(t testing.TB, dir string, cluster bool, extra ...string) *Node {
	t.Helper()
	port := freePort(t, cluster)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
		"--proto-max-bulk-len", "64mb"}
	if cluster {
		// A replica syncs at once (no diskless delay), so the test's
		// failover finds replicas that have the data.
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0")
	}
	args = append(args, extra...)
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	n := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(n.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-n.done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", n.Addr); err == nil {
			c.Close()
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", n.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitClusterOK(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, "redis-cli", "-u", "redis://"+addr, "cluster", "info").Output()
		if err == nil && bytes.Contains(out, []byte("cluster_state:ok")) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("cluster not ok at %s: %s %v", addr, out, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort finds a free loopback port (see freeport: servers may restart
// on it). A cluster node's bus port, 10000 above it, must be free too.
func freePort(t testing.TB, cluster bool) int {
	t.Helper()
	for range 1000 {
		ps, err := freeport.Ports(1)
		if err != nil {
			t.Fatal(err)
		}
		if p := ps[0]; !cluster || freeport.Free(p+10000) {
			return p
		}
	}
	t.Fatal("no free port pair for a redis cluster node")
	return 0
}
