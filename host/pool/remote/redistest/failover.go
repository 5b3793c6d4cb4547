package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// KillPrimary SIGKILLs the first primary once its replicas hold every
// write it took, and returns when its replica serves its slots and the
// cluster is ok again; it returns the killed node's index. Replication is
// asynchronous: a primary killed right after a write may take it along,
// which Redis does not promise to keep, so a test of surviving the loss
// waits for the replicas first. Waiting for the promotion, not for a
// fixed time, keeps the test from racing the cluster's failure detection.
func (c *Cluster) KillPrimary(t testing.TB, within time.Duration) int {
	t.Helper()
	victim := -1
	for i := range c.Nodes {
		if c.Primary(i) {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("redis cluster: no primary to kill")
	}
	replicas := c.waitReplicated(t, victim, within)
	c.Kill(victim)
	deadline := time.Now().Add(within)
	for {
		for _, r := range replicas {
			if c.Primary(r) {
				waitClusterOK(t, c.Nodes[r].Addr, time.Until(deadline))
				return victim
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis cluster: no replica of %s promoted within %s", c.Nodes[victim].Addr, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReplicated waits until node i has a replica and every replica has
// acknowledged its replication offset, and returns the replicas' node
// indexes.
func (c *Cluster) waitReplicated(t testing.TB, i int, within time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, err := cli(c.Nodes[i].Addr, "info", "replication")
		if err == nil {
			master, replicas := parseReplication(out)
			var idx []int
			for addr, off := range replicas {
				if j := c.node(addr); j >= 0 && off >= master {
					idx = append(idx, j)
				}
			}
			if len(idx) > 0 && len(idx) == len(replicas) {
				return idx
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis cluster: %s has no replica, or one behind, after %s: %s %v", c.Nodes[i].Addr, within, out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parseReplication reads a primary's INFO replication: its offset, and
// each replica's address and acknowledged offset.
func parseReplication(out []byte) (master int64, replicas map[string]int64) {
	replicas = map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if key == "master_repl_offset" {
			master, _ = strconv.ParseInt(val, 10, 64)
			continue
		}
		if !strings.HasPrefix(key, "slave") {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Split(val, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		off, err := strconv.ParseInt(f["offset"], 10, 64)
		if f["ip"] == "" || f["port"] == "" || err != nil {
			continue
		}
		replicas[fmt.Sprintf("%s:%s", f["ip"], f["port"])] = off
	}
	return master, replicas
}
