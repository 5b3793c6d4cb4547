// Package natscluster runs a real NATS cluster for tests: nats-server
// processes built from the nats-server module this project already
// depends on, clustered on loopback with JetStream on, so the shared tier
// and the command plane can be tested against replicas, node loss and
// rolling restarts.
package natscluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/freeport"
)

// Node is one nats-server process.
type Node struct {
	Name       string
	ClientPort int
	conf       string
	cmd        *exec.Cmd
	done       chan struct{}
	log        *os.File
}

// URL is the node's client address.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.ClientPort) }

// Cluster is a running cluster.
type Cluster struct {
	Nodes []*Node
	bin   string
	dir   string
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// binary builds nats-server once per test process from the module in
// go.mod (the build cache makes later processes fast), into a directory
// that lives as long as the process.
func binary() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natscluster-bin")
		if err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build nats-server: %w: %s", err, out)
			return
		}
		builtBin = bin
	})
	return builtBin, buildErr
}

// Start builds nats-server (once) and starts n nodes in dir, clustered,
// with JetStream on, and waits until JetStream answers through every node.
func Start(ctx context.Context, dir string, n int) (*Cluster, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		node := &Node{Name: fmt.Sprintf("n%d", i+1), ClientPort: ports[i]}
		node.conf = filepath.Join(dir, node.Name+".conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 268435456, max_file_store: 2147483648 }
cluster { name: kvpilot-test, listen: 127.0.0.1:%d, routes: [%s] }
`, node.Name, node.ClientPort, filepath.Join(dir, node.Name), ports[n+i], strings.Join(routes, ", "))
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		if err := c.start(node); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, node := range c.Nodes {
		if err := WaitJetStream(ctx, node.URL()); err != nil {
			c.Stop()
			return nil, fmt.Errorf("node %s: %w", node.Name, err)
		}
	}
	return c, nil
}

// ForTest starts an n-node cluster for a test, skipped under -short,
// stopped when the test ends; ctx bounds the test at two minutes.
func ForTest(t testing.TB, n int) (cl *Cluster, ctx context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: starts a %d-node nats-server cluster; run without -short", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cl, err := Start(ctx, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	return cl, ctx
}

// URL lists every node's client address, comma-separated, as NATS clients
// take it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

func (c *Cluster) start(n *Node) error {
	log, err := os.OpenFile(filepath.Join(c.dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(c.bin, "-c", n.conf)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	if err := n.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.log, n.done = log, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(n.cmd, n.done)
	return nil
}

// Kill SIGKILLs node i and waits for the process to end.
func (c *Cluster) Kill(i int) { c.signal(c.Nodes[i], syscall.SIGKILL) }

// Restart stops node i gracefully (SIGTERM, as an operator's rolling
// restart does), starts it again on the same store and waits until
// JetStream answers through it.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.Nodes[i]
	c.signal(n, syscall.SIGTERM)
	return c.Revive(ctx, i)
}

// Revive starts a stopped or killed node i again on its store.
func (c *Cluster) Revive(ctx context.Context, i int) error {
	n := c.Nodes[i]
	if err := c.start(n); err != nil {
		return err
	}
	return WaitJetStream(ctx, n.URL())
}

// Stop ends every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		c.signal(n, syscall.SIGTERM)
	}
}

func (c *Cluster) signal(n *Node, sig syscall.Signal) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(sig)
		select {
		case <-n.done:
		case <-time.After(15 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
	n.log.Close()
	n.cmd = nil
}

// WaitJetStream waits until a client connected to url gets account info
// from JetStream, which needs the cluster's meta leader.
func WaitJetStream(ctx context.Context, url string) error {
	var last error
	for {
		last = jetStreamReady(ctx, url)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func jetStreamReady(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

// freePorts are the nodes' client and route ports, kept across restarts.
func freePorts(n int) ([]int, error) { return freeport.Ports(n) }
