package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/syncbuf"
)

// Only policies change live: an edit of any other key in a watched config
// is logged as needing a restart, naming the key, instead of being ignored.
func TestEditOfOtherKeysSaysItNeedsARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvpilot.yaml")
	if err := os.WriteFile(path, []byte("gc_percent: 400\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	r := newRuntime(t, &recorder{}, func(o *Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.WatchConfig(ctx, path, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := os.WriteFile(path, []byte("gc_percent: 500\nindex: {page_size: 32}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "need a restart") {
		if time.Now().After(deadline) {
			t.Fatalf("no restart warning; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := logs.String(); !strings.Contains(out, "gc_percent") || !strings.Contains(out, "index") {
		t.Fatalf("the warning does not name the keys:\n%s", out)
	}
}
