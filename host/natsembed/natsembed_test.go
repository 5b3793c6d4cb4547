package natsembed

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func start(t *testing.T, o Options) *NATS {
	t.Helper()
	n, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestInProcessPersists starts an in-process-only server, stores a
// JetStream message, restarts on the same data dir and reads it back.
func TestInProcessPersists(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Start(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Embedded() || n.ClientURL() != "" || n.Server().Addr() != nil {
		t.Fatalf("in-process server has a listener: %q", n.ClientURL())
	}
	js, err := n.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("kvpilot")); err != nil {
		t.Fatal(err)
	}
	// A second in-process connection sees the same server.
	c2, err := n.Connect("second")
	if err != nil {
		t.Fatal(err)
	}
	js2, _ := jetstream.New(c2)
	kv2, err := js2.KeyValue(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv2.Get(ctx, "k"); err != nil || string(e.Value()) != "kvpilot" {
		t.Fatalf("second connection: %v", err)
	}
	c2.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("JetStream did not store under the data dir: %v", err)
	}

	n = start(t, Options{DataDir: dir})
	js, _ = n.JetStream()
	kv, err = js.KeyValue(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "kvpilot" {
		t.Fatalf("after restart: %v", err)
	}
}

// TestListenAndConnectByURL starts a listening server on a free port and
// connects to it as a cluster client would.
func TestListenAndConnectByURL(t *testing.T) {
	srv := start(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	url := srv.ClientURL()
	if url == "" {
		t.Fatal("listening server has no client URL")
	}
	cl := start(t, Options{URL: url, Name: "client"})
	if cl.Embedded() || cl.Server() != nil {
		t.Fatal("URL client started a server")
	}
	sub, err := srv.Conn().SubscribeSync("kv-control-broadcast")
	if err != nil {
		t.Fatal(err)
	}
	srv.Conn().Flush()
	if err := cl.Conn().Publish("kv-control-broadcast", []byte(`{"type":"Warm"}`)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != `{"type":"Warm"}` {
		t.Fatalf("message over TCP: %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	for name, o := range map[string]Options{
		"no data dir":        {},
		"bad listen":         {DataDir: t.TempDir(), Listen: "localhost"},
		"bad port":           {DataDir: t.TempDir(), Listen: "127.0.0.1:99999"},
		"creds without url":  {DataDir: t.TempDir(), CredsFile: "x.creds"},
		"missing creds file": {URL: "nats://127.0.0.1:1", CredsFile: filepath.Join(t.TempDir(), "none.creds")},
		"creds and nkey":     {URL: "nats://127.0.0.1:1", CredsFile: "a", NKeySeedFile: "b"},
		"cert without key":   {URL: "nats://127.0.0.1:1", TLSCertFile: os.Args[0]},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := Start(o)
			if err == nil {
				n.Close()
				t.Fatal("started")
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error does not wrap ErrConfig: %v", err)
			}
		})
	}
	// An unreachable cluster fails with the URL in the message.
	_, err := Start(Options{URL: "nats://127.0.0.1:1", StartTimeout: time.Second})
	if err == nil {
		t.Fatal("connected to nothing")
	}
}

func TestPortInUse(t *testing.T) {
	a := start(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	addr := a.Server().Addr().String()
	b, err := Start(Options{DataDir: t.TempDir(), Listen: addr, StartTimeout: 2 * time.Second})
	if err == nil {
		b.Close()
		t.Fatalf("second server listened on %s too", addr)
	}
}
