package agents

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The faults' machinery on a real `kvpilot serve`: the sampler reads its
// memory and tiers, a SIGKILL takes it down, and it starts again on the
// same data directory and sockets, which the sampler finds again.
func TestHostProcSurvivesItsFaults(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kvpilot")
	build := exec.Command("go", "build", "-o", bin, "./host/cmd/kvpilot")
	build.Dir = "../../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := startHost(ctx, bin, t.TempDir(), vllmHostConfig(Params{PageSize: 32}, ArmKvpilot, 256, "", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer h.stop()
	smp := &sampler{control: h.controlSocket(), rss: h.rss}
	started := time.Now()
	smp.sample(ctx, started)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		h.signal(sig)
		if n := h.rss(); n != 0 {
			t.Fatalf("after %v the host still has %d bytes resident", sig, n)
		}
		smp.sample(ctx, started)
		if err := h.start(ctx); err != nil {
			t.Fatalf("restart after %v: %v", sig, err)
		}
		smp.sample(ctx, started)
	}
	tr := smp.trace()
	if len(tr.Samples) != 5 {
		t.Fatalf("%d samples, want 5", len(tr.Samples))
	}
	for i, up := range []bool{true, false, true, false, true} {
		s := tr.Samples[i]
		if got := s.RSSBytes > 0 && s.Pages != nil; got != up {
			t.Fatalf("sample %d: rss %d, pages %v: want the host up %v", i, s.RSSBytes, s.Pages, up)
		}
	}
}
