package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// ctl runs `kvpilot ctl` with args and returns its exit status and output.
func ctl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"ctl"}, args...), &out, &errb)
	return code, out.String() + errb.String()
}

func TestCtlOverSocketAndNATS(t *testing.T) {
	dir, err := os.MkdirTemp("", "kvp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h, err := controlhost.Start(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	seqs, err := h.Commit("", make([]uint32, 192)) // 3 pages of 64 tokens
	if err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprint(seqs[2])
	sock := []string{"--socket", h.Socket}
	over := []string{"--nats", h.NATSURL, "--subject", h.Subject}

	for _, tr := range [][]string{sock, over} {
		code, out := ctl(t, append(tr, "cache", "--ttl", "5m", last)...)
		if code != 0 || !strings.HasPrefix(out, "ok: 1 directive applied\n  0 Cache: 1 blocks, ttl 5m0s") {
			t.Fatalf("cache: %d %q", code, out)
		}
		code, out = ctl(t, append(tr, "--json", "unpin", last)...)
		var r struct {
			Verb, Status string
			Reply        directive.TurnReply
		}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Verb != "unpin" || r.Status != "ok" || !r.Reply.OK() || r.Reply.Results[0].Effect.Blocks != 1 {
			t.Fatalf("unpin --json: %d %q", code, out)
		}
		code, out = ctl(t, append(tr, "pin-blocks", last)...)
		if code != 0 || !strings.Contains(out, "ok: 1 directive applied\n  0 pin_blocks: Pinned 1/1 blocks (pinned_count 1)") {
			t.Fatalf("pin-blocks: %d %q", code, out)
		}
		code, out = ctl(t, append(tr, "unpin-blocks", last)...)
		if code != 0 || !strings.Contains(out, "unpinned_count 1") {
			t.Fatalf("unpin-blocks: %d %q", code, out)
		}
		// A refusal prints the reason and its hint, and exits 1.
		code, out = ctl(t, append(tr, "revoke", "no-such-lease")...)
		if code != 1 || !strings.Contains(out, "unknown_lease") || !strings.Contains(out, "hint:") {
			t.Fatalf("revoke: %d %q", code, out)
		}
		code, out = ctl(t, append(tr, "splice", "--session", "s", "--start", "4", "--end", "9", "--text", "[cut]")...)
		// This host has no device pool to splice in.
		if code != 1 || !strings.Contains(out, "unavailable") || !strings.Contains(out, "hint:") {
			t.Fatalf("splice: %d %q", code, out)
		}
	}
	code, out := ctl(t, append(sock, "stats")...)
	if code != 0 || !strings.Contains(out, "worker 0, 64 tokens per page") || !strings.Contains(out, "device") {
		t.Fatalf("stats: %d %q", code, out)
	}
	// One tenant's stats count only its pages (the default tenant has 3).
	code, out = ctl(t, append(sock, "--json", "stats", "--tenant", "nobody")...)
	var env struct {
		Reply struct {
			Tenant string `json:"tenant"`
			Tiers  []struct {
				Tier  string `json:"tier"`
				Pages int64  `json:"pages"`
			} `json:"tiers"`
		} `json:"reply"`
	}
	st := &env.Reply
	if code != 0 || json.Unmarshal([]byte(out), &env) != nil || st.Tenant != "nobody" || len(st.Tiers) == 0 || st.Tiers[0].Pages != 0 {
		t.Fatalf("stats --tenant nobody: %d %q", code, out)
	}
	if code, out = ctl(t, append(sock, "stats", "--tenant", "nobody")...); code != 0 || !strings.Contains(out, `tenant "nobody": 0 pages`) {
		t.Fatalf("stats --tenant: %d %q", code, out)
	}
	// Bad input is explained before anything is sent, as a usage error.
	if code, out := ctl(t, append(sock, "cache", "not-a-hash")...); code != 2 || !strings.Contains(out, "invalid_hash") {
		t.Fatalf("bad hash: %d %q", code, out)
	}
	if code, _ := ctl(t, append(sock, "frobnicate")...); code != 2 {
		t.Fatalf("unknown verb: %d", code)
	}
	// watch --count: prints the events a later commit causes.
	done := make(chan string, 1)
	go func() {
		_, out := ctl(t, append(sock, "watch", "--count", "1")...)
		done <- out
	}()
	deadline := time.Now().Add(10 * time.Second)
	for i := uint32(1); ; i++ {
		fresh := make([]uint32, 64)
		fresh[0] = i // a new page each time: a stored event
		h.Commit("other", fresh)
		select {
		case out := <-done:
			if !strings.Contains(out, "#") || !strings.Contains(out, "device stored") {
				t.Fatalf("watch: %q", out)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("watch printed nothing")
		}
	}
}
