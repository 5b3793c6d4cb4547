package remote

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/natsembed/natscluster"
	"github.com/kvpilot/kvpilot/host/pool"
)

// A put that lands while the bucket's stream has no leader (a fresh R3
// bucket's first moments, two of three nodes down) waits for the election
// instead of failing with "no responders": each try is bounded, and the
// store tries again until the leader answers.
func TestPutWaitsOutALeaderElection(t *testing.T) {
	cl, ctx := natscluster.ForTest(t, 3)
	nc, err := nats.Connect(cl.Nodes[0].URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	be, err := newJetStream(JetStreamOptions{JS: js, Bucket: "pages", Replicas: 3, WriteAttempt: time.Second, ReadAttempt: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := testLayout("m")
	s, err := Open(ctx, Options{Backend: be, Layout: l})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pb := l.PageBytes()

	// Two of three nodes down: no quorum, no leader, for longer than a try.
	cl.Kill(1)
	cl.Kill(2)
	revived := make(chan error, 1)
	go func() {
		time.Sleep(3 * time.Second)
		for _, i := range []int{1, 2} {
			if err := cl.Revive(ctx, i); err != nil {
				revived <- err
				return
			}
		}
		revived <- nil
	}()
	start := time.Now()
	want := page(pb, 9)
	if err := s.Put(ctx, pool.Entry{Key: pool.Key{Seq: 1}, Local: 1}, want); err != nil {
		t.Fatalf("put while the stream elects a leader, after %v: %v", time.Since(start), err)
	}
	t.Logf("put landed %v after the nodes went down", time.Since(start))
	if err := <-revived; err != nil {
		t.Fatal(err)
	}
	// An object store reads from any replica (direct get): a revived node
	// still catching up answers "not found" for the new page. Read once
	// every replica is current.
	for {
		info, err := js.Stream(ctx, "OBJ_pages")
		var si *jetstream.StreamInfo
		if err == nil {
			si, err = info.Info(ctx)
		}
		if err == nil && si.Cluster != nil && len(si.Cluster.Replicas) == 2 && allCurrent(si.Cluster.Replicas) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replicas never caught up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := make([]byte, pb)
	if err := s.Get(ctx, pool.Key{Seq: 1}, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(got, want))
	}
}

func allCurrent(peers []*jetstream.PeerInfo) bool {
	for _, p := range peers {
		if !p.Current || p.Lag > 0 {
			return false
		}
	}
	return true
}
