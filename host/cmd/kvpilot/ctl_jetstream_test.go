package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/config"
)

// A host that takes commands through JetStream answers a plain request
// with the stream's acknowledgement: ctl says the command was accepted
// (and it is applied), never "refused: <nil>". With --jetstream it waits
// for the result. --jetstream against a host without the stream fails
// with a hint naming the setting.
func TestCtlOverNATSSaysWhatJetStreamDid(t *testing.T) {
	h, err := controlhost.Start(filepath.Join(t.TempDir(), "d"), func(c *config.Config) { c.NATS.JetStreamCommands = true })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	seqs, err := h.Commit("", make([]uint32, 128))
	if err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprint(seqs[1])
	over := []string{"--nats", h.NATSURL, "--subject", h.Subject}

	code, out := ctl(t, append(over, "cache", "--ttl", "5m", last)...)
	if code != 0 || !strings.HasPrefix(out, "accepted: stored in JetStream stream") || !strings.Contains(out, "--jetstream") {
		t.Fatalf("plain request to a JetStream host: %d %q", code, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var (
			p  cache.PageInfo
			ok bool
		)
		h.Daemon.Index().Do(func(ix *cache.Index) { p, ok = ix.Lookup("", seqs[1]) })
		if ok && p.PinCount == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the accepted pin was not applied: %+v %v", p, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, out = ctl(t, append(over, "--jetstream", "unpin", last)...)
	if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied\n  0 Cache: 1 blocks") {
		t.Fatalf("--jetstream unpin: %d %q", code, out)
	}

	plain, err := controlhost.Start(filepath.Join(t.TempDir(), "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	code, out = ctl(t, "--nats", plain.NATSURL, "--subject", plain.Subject, "--jetstream", "--timeout", "3s", "cache", last)
	if code == 0 || !strings.Contains(out, "nats.jetstream_commands") {
		t.Fatalf("--jetstream to a host without command stream: %d %q", code, out)
	}
}
