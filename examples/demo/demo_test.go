package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
		t.Skip("builds kvpilot and runs three hosts")
	}
	bin := filepath.Join(t.TempDir(), "kvpilot")
	build := exec.Command("go", "build", "-o", bin, "./host/cmd/kvpilot")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := demo(ctx, options{kvpilot: bin, config: "kvpilot.yaml", requests: 8, pageSize: 16, idleWait: 3})
	if err != nil {
		t.Fatal(err)
	}
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
	if re <= 0 || saved < savedMin || !rep.contractOK() {
		t.Fatalf("edit cost: prefix cache %d, kvpilot %d, saved %.2f; contract %v", re, sp, saved, rep.contractOK())
	}
	if pol.fillTokens == 0 || pol.engine.RoundedRows == 0 {
		t.Fatalf("kvpilot filled %d tokens and the engine saw %d rotated rows: no splice ran", pol.fillTokens, pol.engine.RoundedRows)
	}
	t.Logf("edit cost: prefix cache %d tokens, kvpilot %d: saved %.1f%%", re, sp, 100*saved)
}
