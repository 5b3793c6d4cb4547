package natscluster

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An object store at three replicas keeps its objects through the loss of
// one node and through a rolling restart of every node.
func TestObjectStoreSurvivesNodeLossAndRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node nats-server cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := Start(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	open := func() jetstream.ObjectStore {
		t.Helper()
		nc, err := nats.Connect(cl.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for {
			octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
			obs, err := js.CreateOrUpdateObjectStore(octx, jetstream.ObjectStoreConfig{Bucket: "pages", Replicas: 3, Storage: jetstream.FileStorage})
			ocancel()
			if err == nil {
				return obs
			}
			t.Logf("open bucket: %v", err)
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	page := bytes.Repeat([]byte{7, 1, 2}, 100_000)
	obs := open()
	if _, err := obs.PutBytes(ctx, "p1", page); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		start := time.Now()
		obs := open()
		// A read whose stream leader is lost mid-way stalls; like the
		// host's remote tier, bound each try and try again.
		for {
			gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
			got, err := obs.GetBytes(gctx, "p1")
			gcancel()
			if err == nil && bytes.Equal(got, page) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %d bytes, %v", when, len(got), err)
			}
			t.Logf("%s: read %d bytes, %v; trying again", when, len(got), err)
		}
		t.Logf("%s: read back in %v", when, time.Since(start))
	}
	cl.Kill(0)
	check("one node killed")
	if err := cl.Revive(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i := range cl.Nodes {
		if err := cl.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	check("after a rolling restart")
}
