// Package readme holds a test that walks the README as a newcomer would:
// every shell block's command is run as written (or named here with the
// reason it cannot run in a test), so a command there that stops working
// fails the suite.
package readme

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/freeport"
	"github.com/kvpilot/kvpilot/host/syncbuf"
)

// shellLine is one command of a README shell block: its text (comments
// cut, continuation lines joined), the heading and tour step it is under,
// and for a "$ cmd" transcript the output lines shown after it.
type shellLine struct {
	section, step string
	text          string
	transcript    []string
	shown         bool // a "$ cmd" transcript
}

// readmeCommands returns every command of every ```sh block, in order.
func readmeCommands(t *testing.T, readme string) []shellLine {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out           []shellLine
		section, step string
		inBlock       bool
		current       *shellLine
		pending       string // a command whose quotes are still open, or that ends in \
	)
	// open reports whether a command goes on on the next line: an open
	// quote, or a trailing backslash.
	open := func(s string) bool { return strings.Count(s, "'")%2 == 1 || strings.HasSuffix(s, "\\") }
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock, current = !inBlock && strings.HasPrefix(line, "```sh"), nil
			continue
		case !inBlock && strings.HasPrefix(line, "## "):
			section, step = strings.TrimPrefix(line, "## "), ""
			continue
		case !inBlock && section == "A five-minute tour" && strings.HasPrefix(line, "**"):
			// "**3. A policy.** ...": the step's number.
			if n, _, ok := strings.Cut(line[2:], "."); ok {
				step = n
			}
			continue
		case !inBlock:
			continue
		}
		switch {
		case pending != "":
			pending = strings.TrimSpace(strings.TrimSuffix(pending, "\\")) + " " + strings.TrimSpace(line)
			if !open(pending) {
				out = append(out, shellLine{section: section, step: step, text: pending})
				pending = ""
			}
		case strings.HasPrefix(line, "$ "):
			out = append(out, shellLine{section: section, step: step, text: strings.TrimPrefix(line, "$ "), shown: true})
			current = &out[len(out)-1]
		case current != nil:
			current.transcript = append(current.transcript, line)
		case strings.HasPrefix(strings.TrimSpace(line), "#"):
			// A comment line: the edit step 3 asks for is read by editConfig.
		default:
			text := line
			if i := strings.Index(text, " #"); i >= 0 {
				text = text[:i]
			}
			if text = strings.TrimSpace(text); text == "" {
				continue
			}
			if open(text) {
				pending = text
				continue
			}
			out = append(out, shellLine{section: section, step: step, text: text})
		}
	}
	if pending != "" {
		t.Fatalf("README: a command's quotes never close: %s", pending)
	}
	return out
}

// notRunHere are README commands this test does not run, and why.
var notRunHere = map[string]string{
	"make run":  "the test starts the host as `make run` does: bin/kvpilot serve on the built-in defaults",
	"make test": "it is the suite this test is part of",
	"python -m vllm.entrypoints.openai.api_server ": "needs vLLM's CPU build from the Python lock and a model; " +
		"sdk/python/tests/test_vllm_http.py runs this command from the README, MODEL and the port filled in",
	"python -m sglang.launch_server ": "needs a GPU and a model; sdk/python/tests/test_sglang_*.py run the backend on SGLang's own cache code on CPU, " +
		"examples/sglang/gpu-check.sh runs the server",
	"bin/kvpilot bench vllm": "starts vLLM a dozen times on a 4K-token prompt (minutes); its parts run in " +
		"sdk/python/tests/test_vllm_*.py and host/bench/scenario TestPyReport",
	"go run ./examples/refengine/cmd/refengine --socket kvpilot-data/run/engine.sock --page-size 64 --listen ": "serves HTTP until interrupted; " +
		"examples/refengine/gateway_test.go and sdk/python/tests/test_gateway_*.py run the front door against it",
	"bin/kvpilot bench agents": "starts vLLM five times and loads it for minutes; host/bench/agents TestRefengineForm " +
		"runs its arms on the reference engine",
	"bin/kvpilot bench real-model": "three minutes of CPU on two cores (SmolLM2-135M-Instruct, 4,096 tokens, three runs " +
		"of each arm); sdk/python/tests/test_torchengine_bench.py runs its driver on a 1,200-token prompt",
}

func notRun(text string) (string, bool) {
	for prefix, why := range notRunHere {
		if strings.HasPrefix(text, prefix) {
			return why, true
		}
	}
	return "", false
}

// freePort is a port for the host to listen on across the tour's
// restarts (see freeport for why not an ephemeral one).
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// tour is the newcomer's machine: the repository, a working directory
// with the built binaries under bin/, and the host started in it.
type tour struct {
	t         *testing.T
	repo, dir string
	ports     []string // the host's HTTP and NATS addresses, free ones
	host      *exec.Cmd
	hostLog   *syncbuf.Buffer
}

func (tr *tour) build(out, pkg string) {
	cmd := exec.Command("go", "build", "-o", filepath.Join(tr.dir, out), pkg)
	cmd.Dir, cmd.Env = tr.repo, append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tr.t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// command builds line as a shell would run it from dir: leading VAR=value
// assignments go to the environment, bin/ is the built binaries, and the
// README's `go run` of the reference engine is its built binary.
func (tr *tour) command(ctx context.Context, line, dir string) *exec.Cmd {
	line = strings.Replace(line, "go run ./examples/refengine/cmd/refengine", filepath.Join(tr.dir, "refengine"), 1)
	line = strings.ReplaceAll(line, "/tmp/kvpilot.yaml", filepath.Join(tr.dir, "kvpilot.yaml"))
	f := strings.Fields(line)
	env := append(os.Environ(), tr.ports...)
	for len(f) > 1 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-") {
		env = append(env, f[0])
		f = f[1:]
	}
	cmd := exec.CommandContext(ctx, f[0], f[1:]...)
	if strings.HasPrefix(f[0], "bin/") {
		cmd.Path = filepath.Join(tr.dir, f[0])
	}
	cmd.Dir, cmd.Env = dir, env
	return cmd
}

func (tr *tour) run(line, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := tr.command(ctx, line, dir).CombinedOutput()
	return string(out), err
}

// serve starts a host command and waits until its Control socket is
// bound; the previous host is stopped first, as Ctrl-C would.
func (tr *tour) serve(line string) {
	tr.stop()
	log := &syncbuf.Buffer{}
	cmd := tr.command(context.Background(), line, tr.dir)
	cmd.Stdout, cmd.Stderr = log, log
	sock := filepath.Join(tr.dir, "kvpilot-data", "run", "control.sock")
	_ = os.Remove(sock)
	if err := cmd.Start(); err != nil {
		tr.t.Fatalf("%s: %v", line, err)
	}
	tr.host, tr.hostLog = cmd, log
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		if time.Now().After(deadline) {
			tr.t.Fatalf("%s did not start:\n%s", line, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tr *tour) stop() {
	if tr.host == nil {
		return
	}
	_ = tr.host.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = tr.host.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = tr.host.Process.Kill()
		<-done
		tr.t.Errorf("the host did not stop within 20s of Ctrl-C:\n%s", tr.hostLog.String())
	}
	tr.host = nil
}

// The README, run as written against a host started as `make run` starts
// it (the binary's embedded defaults, in a fresh directory): every command
// succeeds, a shown transcript is what the command prints, step 3's config
// edit starts the policies it names, and step 4's benchmarks all run.
func TestReadmeTourRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds three binaries and runs every benchmark; run without -short")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	lines := readmeCommands(t, filepath.Join(repo, "README.md"))
	tr := &tour{t: t, repo: repo, dir: t.TempDir(),
		ports: []string{"KVPILOT_HTTP__LISTEN=" + freePort(t), "KVPILOT_NATS__LISTEN=" + freePort(t)}}
	defer tr.stop()
	// The tour's paths are the repository's: its examples, and the
	// benchmarks' traces next to it.
	if err := os.Symlink(filepath.Join(repo, "examples"), filepath.Join(tr.dir, "examples")); err != nil {
		t.Fatal(err)
	}
	tr.build("bin/kvpilot", "./host/cmd/kvpilot")
	tr.build("bin/kvpilot-bench", "./host/cmd/kvpilot-bench") // what `kvpilot bench` runs, as make build puts it
	tr.build("refengine", "./examples/refengine/cmd/refengine")
	tr.serve("bin/kvpilot serve") // what `make run` runs

	steps := map[string]int{}
	for _, l := range lines {
		if why, skip := notRun(l.text); skip {
			t.Logf("not run here: %s (%s)", l.text, why)
			continue
		}
		steps[l.step]++
		switch {
		case l.shown:
			out, _ := tr.run(l.text, tr.dir)
			for _, w := range l.transcript {
				if !strings.Contains(out, w) {
					t.Errorf("%s: output lacks %q; it printed:\n%s", l.text, w, out)
				}
			}
		case strings.HasPrefix(l.text, "bin/kvpilot serve"):
			tr.serve(l.text)
			checkPolicies(t, tr, l.text)
		case strings.HasPrefix(l.text, "bin/kvpilot bench"):
			tr.bench(l.text)
		default:
			if out, err := tr.run(l.text, tr.dir); err != nil {
				t.Errorf("%s: %v\n%s", l.text, err, out)
			}
			if strings.HasPrefix(l.text, "cp ") && strings.HasSuffix(l.text, "/tmp/kvpilot.yaml") {
				editConfig(t, tr, repo)
			}
		}
	}
	for _, step := range []string{"1", "2", "3", "4"} {
		if steps[step] == 0 {
			t.Errorf("the tour's step %s has no command this test ran", step)
		}
	}
}

// bench runs a benchmark as step 4 says: from the repository (the traces
// are in examples/traces).
func (tr *tour) bench(line string) {
	start := time.Now()
	out, err := tr.run(line, tr.repo)
	if err != nil {
		tr.t.Errorf("%s: %v\n%s", line, err, out)
		return
	}
	tr.t.Logf("%s: ran in %v", line, time.Since(start).Round(time.Millisecond))
}

// editConfig makes the edit step 3 shows in comments on the copied
// config: its policies: lines replace the example's empty list.
func editConfig(t *testing.T, tr *tour, repo string) {
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "# edit the policies: section")
	if i < 0 {
		t.Fatal("README step 3 no longer shows the policies edit")
	}
	var edit []string
	for _, l := range strings.Split(text[i:], "\n")[1:] {
		if !strings.HasPrefix(l, "#   ") {
			break
		}
		edit = append(edit, strings.TrimPrefix(l, "#   "))
	}
	path := filepath.Join(tr.dir, "kvpilot.yaml")
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(edit) < 2 || !strings.Contains(string(cfg), "\npolicies: []\n") {
		t.Fatalf("cannot make step 3's edit %q on the example config", edit)
	}
	cfg = []byte(strings.Replace(string(cfg), "\npolicies: []\n", "\n"+strings.Join(edit, "\n")+"\n", 1))
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkPolicies waits until the host started from the edited config runs
// the policies step 3 names.
func checkPolicies(t *testing.T, tr *tour, line string) {
	for deadline := time.Now().Add(30 * time.Second); ; {
		log := tr.hostLog.String()
		if strings.Contains(log, "policy set installed") && strings.Contains(log, "trunc") && strings.Contains(log, "pins") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the policies of step 3's edit did not start:\n%s", line, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
