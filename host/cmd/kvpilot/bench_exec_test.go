package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// benchBuild is kvpilot-bench built once for this test binary.
var benchBuild struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchBuild.dir != "" {
		os.RemoveAll(benchBuild.dir)
	}
	os.Exit(code)
}

// goTool is the go command (go test puts its own first on PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build or list packages with (%v): put the Go toolchain on PATH", err)
	}
	return p
}

// benchOnPath builds kvpilot-bench (once) and puts it first on PATH, as
// `make build` puts it beside kvpilot, so `bench` runs it.
func benchOnPath(t *testing.T) {
	t.Helper()
	goCmd := goTool(t)
	benchBuild.once.Do(func() {
		benchBuild.dir, benchBuild.err = os.MkdirTemp("", "kvpilot-bench-bin-")
		if benchBuild.err != nil {
			return
		}
		cmd := exec.Command(goCmd, "build", "-o", filepath.Join(benchBuild.dir, benchCommand), "../kvpilot-bench")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			benchBuild.err = errors.New("go build ./host/cmd/kvpilot-bench: " + err.Error() + "\n" + string(out))
		}
	})
	if benchBuild.err != nil {
		t.Fatal(benchBuild.err)
	}
	t.Setenv("PATH", benchBuild.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// `kvpilot bench` runs kvpilot-bench with its arguments and stdio, and
// exits with its status: a real scenario's JSON report comes through
// whole, a usage error stays status 2, a missed --check target status 1.
func TestBenchRunsKvpilotBench(t *testing.T) {
	benchOnPath(t)
	code, out, errs := runCLI("bench", "rotate", "--slots", "64", "--layers", "1", "--iters", "1", "--json")
	var rep struct {
		Targets map[string]any `json:"targets"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Targets == nil {
		t.Fatalf("bench rotate --json: status %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runCLI("bench", "control", "--help")
	if code != 0 || !strings.Contains(out, "Usage: kvpilot bench control") || errs != "" {
		t.Errorf("bench control --help: status %d, stdout %.80q, stderr %q", code, out, errs)
	}
	code, out, errs = runCLI("bench", "no-such-scenario")
	if code != 2 || out != "" || !strings.Contains(errs, `kvpilot bench: unknown scenario "no-such-scenario"`) {
		t.Errorf("bench no-such-scenario: status %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runCLI("bench", "control", "--iters", "1")
	if code != 1 || !strings.Contains(errs, "kvpilot bench: bench control: --iters 1") || strings.Contains(errs, "exit status") {
		t.Errorf("bench control --iters 1: status %d, stderr %q", code, errs)
	}
}

// Without kvpilot-bench beside kvpilot or on PATH, bench says so and what
// to do, with status 2 (1 would read as a missed --check target).
func TestBenchWithoutKvpilotBench(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, out, errs := runCLI("bench", "control")
	if code != 2 || out != "" || !strings.Contains(errs, "kvpilot-bench not found") || !strings.Contains(errs, "hint: run `make build`") {
		t.Fatalf("bench without kvpilot-bench: status %d, stdout %q, stderr %q", code, out, errs)
	}
}

// The kvpilot-bench beside kvpilot wins over one on PATH: bin/kvpilot runs
// the bin/kvpilot-bench built with it.
func TestFindBenchBesideKvpilot(t *testing.T) {
	beside, onPath := t.TempDir(), t.TempDir()
	for _, dir := range []string{beside, onPath} {
		if err := os.WriteFile(filepath.Join(dir, benchCommand), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", onPath)
	for _, c := range []struct{ exeDir, want string }{
		{beside, filepath.Join(beside, benchCommand)},
		{t.TempDir(), filepath.Join(onPath, benchCommand)},
		{"", filepath.Join(onPath, benchCommand)},
	} {
		if got, err := findBench(c.exeDir); err != nil || got != c.want {
			t.Errorf("findBench(%q) = %q, %v; want %q", c.exeDir, got, err, c.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := findBench(t.TempDir()); !errors.Is(err, errBenchMissing) {
		t.Errorf("findBench with none: %v, want errBenchMissing", err)
	}
}

// The production binary links no benchmark harness: nothing under
// host/bench (scenarios, rigs, the cache, tier and rotate harnesses) and
// no example (the reference engine the rigs run).
func TestKvpilotLinksNoHarness(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps ./host/cmd/kvpilot: %v", err)
	}
	const module = "github.com/kvpilot/kvpilot/"
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"host/daemon") {
		t.Fatalf("go list -deps ./host/cmd/kvpilot lacks host/daemon: %q", deps)
	}
	for _, d := range deps {
		p := strings.TrimPrefix(d, module)
		if p == d {
			continue // another module
		}
		if p == "host/bench" || strings.HasPrefix(p, "host/bench/") || strings.HasPrefix(p, "examples/") || strings.HasSuffix(p, "bench") {
			t.Errorf("kvpilot links %s", d)
		}
	}
}
