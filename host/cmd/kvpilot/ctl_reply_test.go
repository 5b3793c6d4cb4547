package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/controlhost"
)

var firstLine = regexp.MustCompile(`^(ok|refused|accepted): \S`)

// Every ctl verb answers in one shape: "<status>: <summary>" with
// indented detail, a refusal's hint on the line after it; with --json one
// envelope naming the verb and the status, a refusal's error with its
// code and hint, the host's answer under "reply".
func TestEveryCtlVerbRepliesInOneShape(t *testing.T) {
	dir := t.TempDir()
	h, err := controlhost.Start(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()
	seqs, err := h.Commit("", make([]uint32, 192))
	if err != nil {
		t.Fatal(err)
	}
	last := fmt.Sprint(seqs[2])
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	calls := map[string][]string{
		"warm":              {last},
		"prune":             {last},
		"cache":             {last},
		"pin":               {last, "--ttl", "5m"},
		"unpin":             {last},
		"think":             {last},
		"pause":             {"--lease", "l1", last},
		"renew":             {"l1", "5m"},
		"revoke":            {"no-such-lease"},
		"resume":            {"no-such-lease"},
		"splice":            {"--session", "s", "--start", "4", "--end", "9", "--text", "x"},
		"evict":             {"--session", "s", "--start", "0", "--end", "64"},
		"retain":            {"--session", "s", "--start", "0", "--end", "64"},
		"share":             {"--session", "s", "--end", "64"},
		"pin-blocks":        {last},
		"unpin-blocks":      {last},
		"evict-descendants": {"12345"},
		"pin-prefix":        {"0..128"},
		"unpin-prefix":      {"0..128"},
		"apply":             {file("turn.json", `{"type":"Cache","block_hashes":[`+last+`],"pin":true}`)},
		"cache-control":     {file("cc.json", `{"action":"pin_blocks","block_hashes":[`+last+`]}`)},
		"stats":             {},
	}
	seen := map[string]bool{}
	for verb, args := range calls {
		seen[verb] = true
		base := append([]string{"--socket", h.Socket, verb}, args...)
		code, out, errs := runCLI(append([]string{"ctl"}, base...)...)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if errs != "" || !firstLine.MatchString(lines[0]) {
			t.Errorf("%s: status %d, stdout %q, stderr %q", verb, code, out, errs)
			continue
		}
		refused := strings.HasPrefix(lines[0], "refused:")
		if refused != (code == 1) || refused && (len(lines) < 2 || !strings.HasPrefix(lines[1], "  hint: ")) {
			t.Errorf("%s: status %d with reply %q (a refusal exits 1 and gives its hint)", verb, code, out)
		}
		for _, l := range lines[1:] {
			if !strings.HasPrefix(l, "  ") {
				t.Errorf("%s: detail line %q is not indented", verb, l)
			}
		}
		code, out, errs = runCLI(append([]string{"ctl", "--json"}, base...)...)
		var env struct {
			Verb, Status string
			Error        *struct{ Code, Hint string }
			Reply        json.RawMessage
		}
		if errs != "" || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &env) != nil || env.Verb != verb {
			t.Errorf("%s --json: status %d, stdout %q, stderr %q", verb, code, out, errs)
			continue
		}
		switch env.Status {
		case "ok":
			if code != 0 || env.Error != nil || len(env.Reply) == 0 {
				t.Errorf("%s --json: ok with status %d: %s", verb, code, out)
			}
		case "refused":
			if code != 1 || env.Error == nil || env.Error.Code == "" || env.Error.Hint == "" {
				t.Errorf("%s --json: refused with status %d, without code and hint: %s", verb, code, out)
			}
		default:
			t.Errorf("%s --json: status %q", verb, env.Status)
		}
	}
	for verb := range ctlVerbs {
		if !seen[verb] && verb != "watch" {
			t.Errorf("verb %s is not checked here", verb)
		}
	}
	checkWatchEnvelope(t, h)
}

// watch prints one envelope per event with --json.
func checkWatchEnvelope(t *testing.T, h *controlhost.Host) {
	done := make(chan string, 1)
	go func() {
		_, out, _ := runCLI("ctl", "--json", "--socket", h.Socket, "watch", "--count", "1")
		done <- out
	}()
	deadline := time.Now().Add(10 * time.Second)
	for i := uint32(1); ; i++ {
		fresh := make([]uint32, 64)
		fresh[0] = 1000 + i
		if _, err := h.Commit("other", fresh); err != nil {
			t.Fatal(err)
		}
		select {
		case out := <-done:
			var env struct{ Verb, Status string }
			if json.Unmarshal([]byte(out), &env) != nil || env.Verb != "watch" || env.Status != "ok" || !strings.Contains(out, `"reply":{`) {
				t.Fatalf("watch --json: %q", out)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("watch printed nothing")
		}
	}
}
