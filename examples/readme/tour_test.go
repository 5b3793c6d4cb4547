// Package readme holds a test that walks the README's tour as a newcomer
// would, so a command there that stops working fails the suite.
package readme

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tourCommands returns the shell lines of the tour's steps 1 and 2 (before
// "**3. A policy.**"): the commands to run (comments cut), and the
// transcript lines ("$ cmd" followed by its expected output).
func tourCommands(t *testing.T, readme string) (cmds []string, transcript map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start, end := strings.Index(text, "## A five-minute tour"), strings.Index(text, "**3. A policy.**")
	if start < 0 || end < start {
		t.Fatal("README has no tour steps 1 and 2")
	}
	transcript = map[string][]string{}
	inBlock, current := false, ""
	sc := bufio.NewScanner(strings.NewReader(text[start:end]))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock, current = !inBlock && strings.HasPrefix(line, "```sh"), ""
		case !inBlock:
		case strings.HasPrefix(line, "$ "):
			current = strings.TrimPrefix(line, "$ ")
		case current != "":
			transcript[current] = append(transcript[current], line)
		default:
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				cmds = append(cmds, line)
			}
		}
	}
	return cmds, transcript
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The README's tour, run as written against a host started as `make run`
// starts it (the binary's embedded defaults, in a fresh directory): every
// command succeeds, and a shown refusal is what the host answers.
func TestReadmeTourRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds, transcript := tourCommands(t, filepath.Join(repo, "README.md"))
	if len(cmds) < 4 || len(transcript) == 0 {
		t.Fatalf("found %d commands and %d transcripts in the tour", len(cmds), len(transcript))
	}
	dir := t.TempDir()
	build := func(out, pkg string) {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	build("bin/kvpilot", "./host/cmd/kvpilot")
	build("refengine", "./examples/refengine/cmd/refengine")

	// The host on its defaults, but for ports another process may hold.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host := exec.CommandContext(ctx, filepath.Join(dir, "bin/kvpilot"), "serve")
	host.Dir = dir
	host.Env = append(os.Environ(), "KVPILOT_HTTP__LISTEN="+freePort(t), "KVPILOT_NATS__LISTEN="+freePort(t))
	var hostLog strings.Builder
	host.Stderr = &hostLog
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = host.Wait() }()
	sock := filepath.Join(dir, "kvpilot-data", "run", "control.sock")
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host did not start:\n%s", hostLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	run := func(line string) (string, error) {
		line = strings.Replace(line, "go run ./examples/refengine/cmd/refengine", filepath.Join(dir, "refengine"), 1)
		f := strings.Fields(line)
		cmd := exec.Command(f[0], f[1:]...)
		if strings.HasPrefix(f[0], "bin/") {
			cmd.Path = filepath.Join(dir, f[0])
		}
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, line := range cmds {
		if out, err := run(line); err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
		}
	}
	for line, want := range transcript {
		out, _ := run(line)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q; it printed:\n%s", line, w, out)
			}
		}
	}
}
