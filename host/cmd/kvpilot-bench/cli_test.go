package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// With no scenario named the command lists them on stdout; an unknown one
// is a usage error (status 2) that lists them on stderr; a scenario's
// help goes to stdout and names the command users type, kvpilot bench.
func TestListHelpAndUsage(t *testing.T) {
	for _, c := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{nil, 0, "Scenarios:", ""},
		{[]string{"list"}, 0, "Scenarios:", ""},
		{[]string{"no-such-scenario"}, 2, "", `unknown scenario "no-such-scenario"`},
		{[]string{"control", "--help"}, 0, "Usage: kvpilot bench control", ""},
	} {
		code, out, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errs, c.errs) {
			t.Errorf("%v: status %d, stdout %.80q, stderr %.80q; want %d, %q, %q", c.args, code, out, errs, c.code, c.stdout, c.errs)
		}
	}
}

// bench real-model whose Python lacks a module says which, with the line
// the child's traceback ended with, and the command that installs the
// repository's pinned lock into that interpreter. (The child here is a
// stand-in that fails as Python does without PyTorch; the Python suite's
// test_bench_real_model_without_torch runs the real interpreter.)
func TestRealModelWithoutTorchSaysWhatToInstall(t *testing.T) {
	py := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n" +
		"echo '  File \"<frozen runpy>\", line 198, in _run_module_as_main' >&2\n" +
		"echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI("real-model", "--python", py)
	root, _ := filepath.Abs("../../..")
	for _, want := range []string{
		"kvpilot bench: bench real-model: " + py + " -m kvbench.realmodel: exit status 1: ModuleNotFoundError: No module named 'torch'\n",
		"  hint: install what the benchmark's Python side needs: " + py + " -m pip install --no-deps -r " + filepath.Join(root, "sdk/python/requirements.txt"),
	} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("status %d, stderr:\n%s\nwant it to hold %q", code, errs, want)
		}
	}
	if strings.Contains(errs, "is the Python package installed") {
		t.Errorf("stderr still guesses: %s", errs)
	}
}

// Every row of the scenario table has its own name, in the list's order,
// a line in the list, help and flags; its help names the command users
// type, and it takes --json, and --plot when its report draws.
func TestScenarioTable(t *testing.T) {
	var names []string
	for _, s := range scenarios {
		if strings.HasPrefix(s.Name, "fake-") {
			continue // bench_check_test.go's
		}
		names = append(names, s.Name)
		if s.Summary == "" || s.Help == "" || s.Flags == nil {
			t.Errorf("%s: a row wants a summary, help and flags", s.Name)
		}
		code, out, errs := runCLI(s.Name, "--help")
		if code != 0 || !strings.HasPrefix(out, "Usage: kvpilot bench "+s.Name+" [--json] ") || strings.Contains(out, "-plot") != s.Plot {
			t.Errorf("%s --help: status %d, stdout %.200q, stderr %.80q", s.Name, code, out, errs)
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("the table's names are not unique and in order: %q", names)
	}
}
