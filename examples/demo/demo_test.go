package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The demo, shortened: real sessions resent in full through the front
// door of a real `kvpilot serve` (built here) to the reference engine.
// With the policies on, kvpilot saves at least 80% of what a prefix cache
// spends re-prefilling after the same edits; the engine received edited
// messages (the recorder compared them with what the harness sent) in
// both edit passes and none in the plain one; and the engine checked the
// contract on cached rows in every pass (a violation fails the request).
func TestDemoThroughTheFrontDoor(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds kvpilot and runs three hosts; run without -short")
	}
	bin := buildKvpilot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := demo(ctx, options{kvpilot: bin, config: "kvpilot.yaml", engine: engineRef, sessions: 3, requests: 8, idleWait: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkEdits(t, rep)
	pol := rep.passes[2]
	if !rep.contractOK() {
		t.Fatal("an engine checked no cached rows against the contract")
	}
	if pol.fillTokens == 0 || pol.engine.RoundedRows == 0 {
		t.Fatalf("kvpilot filled %d tokens and the engine saw %d rotated rows: no splice ran", pol.fillTokens, pol.engine.RoundedRows)
	}
}

// The demo on a trained model, small: vLLM's CPU build serving
// SmolLM2-135M-Instruct with kvpilot's connector behind each pass's front
// door, one working session of six requests (the truncation policy edits
// the fifth and sixth: a tool result is truncated once three answers
// follow it) and the idle one; make demo runs three sessions of eight.
// One vLLM serves the three passes. The same edits reach the model in both
// edit passes, kvpilot saves at least 80% of the re-prefill, and the
// splice's greedy answers are compared with the re-prefill's, request by
// request (logged, not gated: a splice keeps the kept tokens' stale
// attention to the removed text, which kvpilot bench splice-quality
// measures). It needs the Python environment with vLLM (make py-env;
// make test builds it before the Go tests): without one it is skipped.
func TestDemoOnSmolLM2(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds kvpilot and runs three hosts, each with vLLM; run without -short")
	}
	py := pythonWithVLLM(t)
	bin := buildKvpilot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()
	rep, err := demo(ctx, options{kvpilot: bin, config: "kvpilot.yaml", engine: engineVLLM, python: py, sessions: 1, requests: 6, idleWait: 3})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	_ = rep.write(&table)
	t.Log(table.String())
	checkEdits(t, rep)
	for _, p := range rep.passes {
		if len(p.answers) != p.requests {
			t.Fatalf("%s: %d answers to %d requests", p.name, len(p.answers), p.requests)
		}
	}
	if rep.passes[2].fillTokens == 0 {
		t.Fatal("the front door prefilled no splice replacement: no splice ran")
	}
	sameEdited, edited, same, all := rep.agreement()
	if edited == 0 {
		t.Fatal("no request after an edit to compare the splice's answer on")
	}
	t.Logf("the splice's greedy answer is the re-prefill's: %d of %d requests after an edit (%d of %d in all)", sameEdited, edited, same, all)
}

// checkEdits: the plain pass's engine got no edits, both edit passes the
// same edited tool results, and kvpilot saved at least savedMin of the
// prefix cache's re-prefill.
func checkEdits(t *testing.T, rep *report) {
	t.Helper()
	plain, edits, pol := rep.passes[0], rep.passes[1], rep.passes[2]
	if u := plain.upstream; u.EditedRequests != 0 || u.Requests != plain.requests {
		t.Fatalf("the plain pass's engine got %+v", u)
	}
	for _, p := range []*result{edits, pol} {
		if u := p.upstream; u.EditedRequests == 0 || u.StubbedResults == 0 || u.Mismatched != 0 || u.Requests != p.requests {
			t.Fatalf("%s: the engine got %+v: want edited tool results in the requests", p.name, u)
		}
	}
	if edits.upstream != pol.upstream {
		t.Fatalf("the two edit passes sent different edits: %+v and %+v", edits.upstream, pol.upstream)
	}
	re, sp, saved := rep.savings()
	if re <= 0 || saved < savedMin {
		t.Fatalf("edit cost: prefix cache %d, kvpilot %d, saved %.2f", re, sp, saved)
	}
	t.Logf("edit cost: prefix cache %d tokens, kvpilot %d: saved %.1f%%", re, sp, 100*saved)
}

// buildKvpilot builds the host for the test.
func buildKvpilot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kvpilot")
	build := exec.Command("go", "build", "-o", bin, "./host/cmd/kvpilot")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// pythonWithVLLM is $KVPILOT_PYTHON or the repository's .venv python, if
// it imports vLLM; the test is skipped without one.
func pythonWithVLLM(t *testing.T) string {
	t.Helper()
	py := os.Getenv("KVPILOT_PYTHON")
	if py == "" {
		py, _ = filepath.Abs("../../.venv/bin/python")
	}
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no Python environment at %s (KVPILOT_PYTHON names another): make py-env builds .venv with vLLM", py)
	}
	if out, err := exec.Command(py, "-c", "import vllm").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import vLLM: %v\n%s", py, err, out)
	}
	return py
}
