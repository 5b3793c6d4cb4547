package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/natsembed"
)

// startCtlHost starts a host with one committed prefix of two pages and
// returns it, the second page's hash and ctl's flags to reach it over NATS.
func startCtlHost(t *testing.T, jet bool) (*controlhost.Host, string, []string) {
	t.Helper()
	h, err := controlhost.Start(filepath.Join(t.TempDir(), "d"), func(c *config.Config) { c.NATS.JetStreamCommands = jet })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	seqs, err := h.Commit("", make([]uint32, 128))
	if err != nil {
		t.Fatal(err)
	}
	return h, fmt.Sprint(seqs[1]), []string{"--nats", h.NATSURL, "--subject", h.Subject}
}

// A host with a JetStream command stream: a plain request waits past the
// stream's acknowledgement for the host's own answer, ok or refused, never
// "accepted" for either.
func TestCtlWaitsForTheJetStreamHostsAnswer(t *testing.T) {
	_, last, over := startCtlHost(t, true)
	code, out := ctl(t, append(over, "cache", "--ttl", "5m", last)...)
	if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied\n  0 Cache: 1 blocks") {
		t.Fatalf("plain request to a JetStream host: %d %q", code, out)
	}
	code, out = ctl(t, append(over, "renew", "no-such-lease", "5m")...)
	if code != 1 || !strings.HasPrefix(out, "refused: directive 0: unknown_lease") {
		t.Fatalf("a refused command through the stream: %d %q", code, out)
	}
	code, out = ctl(t, append(over, "--jetstream", "unpin", last)...)
	if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied\n  0 Cache: 1 blocks") {
		t.Fatalf("--jetstream unpin: %d %q", code, out)
	}
}

// --jetstream against a host without a command stream: the host applied
// the command, and ctl says so, with no hint that would send it again.
func TestCtlJetStreamToAHostWithoutTheStream(t *testing.T) {
	_, last, over := startCtlHost(t, false)
	code, out := ctl(t, append(over, "--jetstream", "cache", last)...)
	if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied") || strings.Contains(out, "retry") {
		t.Fatalf("--jetstream to a host without a command stream: %d %q", code, out)
	}
}

// Stats over NATS are refused with a code that is not transient, and the
// answer names the Control socket.
func TestCtlStatsOverNATSNamesTheControlSocket(t *testing.T) {
	_, _, over := startCtlHost(t, false)
	code, out := ctl(t, append(over, "stats")...)
	if code != 1 || !strings.HasPrefix(out, "refused: wrong_transport") || !strings.Contains(out, "Control socket") ||
		strings.Contains(out, "retry") {
		t.Fatalf("stats over NATS: %d %q", code, out)
	}
}

// A command stream that stores the command while no host takes it within
// --timeout: ctl says it was stored and that its result is not known, and
// asks not to send it again.
func TestCtlSaysAcceptedOnlyWhenTheResultIsUnknown(t *testing.T) {
	n, err := natsembed.Start(natsembed.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	js, err := n.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KVPILOT_COMMANDS", Subjects: []string{"kv-control-9"}}); err != nil {
		t.Fatal(err)
	}
	code, out := ctl(t, "--nats", n.ClientURL(), "--subject", "kv-control-9", "--timeout", "300ms", "cache", "1")
	if code != 0 || !strings.HasPrefix(out, "accepted: stored in JetStream stream KVPILOT_COMMANDS (seq 1); the host's result did not come") ||
		!strings.Contains(out, "do not send it again") {
		t.Fatalf("a stored command with no host to take it: %d %q", code, out)
	}
}

// The sequence: jetstream_commands on, then a restart on the same
// data dir with it off, then on again. With it off, ctl and a raw NATS
// request get the host's own answer (the stream an earlier run left no
// longer answers in its place); with it on again, nothing the host applied
// directly is replayed: one command, one audit record.
func TestCommandsFollowTheSettingAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	start := func(jet bool) *controlhost.Host {
		t.Helper()
		h, err := controlhost.Start(dir, func(c *config.Config) { c.NATS.JetStreamCommands = jet })
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start(true)
	h.Stop()

	h = start(false)
	seqs, err := h.Commit("", make([]uint32, 128))
	if err != nil {
		t.Fatal(err)
	}
	code, out := ctl(t, "--nats", h.NATSURL, "--subject", h.Subject, "cache", "--ttl", "5m", fmt.Sprint(seqs[1]))
	if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied") {
		t.Fatalf("pin with jetstream_commands off: %d %q", code, out)
	}
	nc, err := nats.Connect(h.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nc.Request(h.Subject, []byte(`{"type":"Think","block_hashes":[`+fmt.Sprint(seqs[1])+`],"transient":true}`), 5*time.Second)
	nc.Close()
	if err != nil || !strings.Contains(string(resp.Data), `"status"`) {
		t.Fatalf("a raw request got %v %q, not the host's answer", err, respBody(resp))
	}
	h.Stop()

	h = start(true)
	// Commands are taken in stream order: once this one's result is back,
	// a replay of anything older would have been applied.
	code, out = ctl(t, "--nats", h.NATSURL, "--subject", h.Subject, "unpin", "1")
	if code != 1 || !strings.Contains(out, "unknown_block") {
		t.Fatalf("a command through the stream: %d %q", code, out)
	}
	h.Stop()
	recs, err := executor.ReadAuditFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	pins := 0
	for _, r := range recs {
		if r.Verb == "Cache" && strings.Contains(r.Target, fmt.Sprint(seqs[1])) && r.Status == "ok" {
			pins++
		}
	}
	if pins != 1 {
		t.Fatalf("%d pins applied for one ctl call; audit %+v", pins, recs)
	}
}

func respBody(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
