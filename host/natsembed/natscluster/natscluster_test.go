package natscluster

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/natsembed"
)

// An object store at three replicas keeps its objects through the loss of
// one node and through a rolling restart of every node.
func TestObjectStoreSurvivesNodeLossAndRollingRestart(t *testing.T) {
	cl, ctx := ForTest(t, 3)
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
		var obs jetstream.ObjectStore
		err = natsembed.RetryBetweenLeaders(ctx, 5*time.Second, time.Minute, func(ctx context.Context) (err error) {
			obs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "pages", Replicas: 3, Storage: jetstream.FileStorage})
			return err
		})
		if err != nil {
			t.Fatalf("open bucket: %v", err)
		}
		return obs
	}
	page := bytes.Repeat([]byte{7, 1, 2}, 100_000)
	obs := open()
	// The bucket's stream may still be electing its first leader: a put
	// now gets "no responders". Like the host's remote tier, try again
	// within bounds.
	err := natsembed.RetryBetweenLeaders(ctx, 10*time.Second, time.Minute, func(ctx context.Context) error {
		_, err := obs.PutBytes(ctx, "p1", page)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		start := time.Now()
		obs := open()
		// A read whose stream leader is lost mid-way stalls; bound each
		// try and try again.
		var got []byte
		err := natsembed.RetryBetweenLeaders(ctx, 10*time.Second, time.Minute, func(ctx context.Context) (err error) {
			got, err = obs.GetBytes(ctx, "p1")
			return err
		})
		if err != nil || !bytes.Equal(got, page) {
			t.Fatalf("%s: %d bytes, %v", when, len(got), err)
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
