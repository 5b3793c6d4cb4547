package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
)

func policiesYAML(tag int, extra string) string {
	return fmt.Sprintf("policies:\n  - name: echo\n    builtin: echo\n    params:\n      tag: %d\n%s", tag, extra)
}

// TestHotSwapByEditAndRenameLosesNothing swaps the policy set three ways
// while a steady stream of observations flows: an in-place edit, a new file
// renamed over the old (how many editors save), and an invalid file, which
// must be rejected with the old set still running.
func TestHotSwapByEditAndRenameLosesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvpilot.yaml")
	if err := os.WriteFile(path, []byte(policiesYAML(1, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r := newRuntime(t, rec, nil)
	c, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Swap(context.Background(), c.Policies); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.WatchConfig(ctx, path, nil); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var offered int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := r.Observe(request(fmt.Sprintf("s%d", i%8), i)); err != nil {
				t.Error(err)
				return
			}
			offered++
			time.Sleep(200 * time.Microsecond)
		}
	}()

	waitGen := func(gen uint64, what string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for r.Generation() < gen {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no swap (generation %d)", what, r.Generation())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond)

	// 1. Edit in place.
	if err := os.WriteFile(path, []byte(policiesYAML(2, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitGen(2, "in-place edit")
	time.Sleep(100 * time.Millisecond)

	// 2. Write a new file and rename it over the config.
	tmp := filepath.Join(dir, ".kvpilot.yaml.swp")
	if err := os.WriteFile(tmp, []byte(policiesYAML(3, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitGen(3, "rename over the file")
	time.Sleep(100 * time.Millisecond)

	// 3. An invalid config (a policy with neither builtin nor path) is
	// rejected; so is a valid one whose policy refuses its params.
	_, rejected0 := r.Reloads()
	if err := os.WriteFile(path, []byte(policiesYAML(4, "  - name: broken\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitRejected(t, r, rejected0+1)
	if err := os.WriteFile(path, []byte(policiesYAML(5, "  - name: refuses\n    builtin: echo\n    params: {fail: true}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitRejected(t, r, rejected0+2)
	if g := r.Generation(); g != 3 {
		t.Fatalf("generation %d after rejected configs, want 3", g)
	}
	time.Sleep(100 * time.Millisecond)

	close(stop)
	wg.Wait()
	cancel()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	st := r.Stats()["echo"]
	checkAccounted(t, st)
	if st.Accepted != uint64(offered) || st.Delivered != uint64(offered) {
		t.Fatalf("offered %d, stats %+v: every observation must be delivered across the swaps", offered, st)
	}
	got, tags := rec.seqs()
	checkOrdered(t, got)
	var n int
	for _, s := range got {
		n += len(s)
	}
	if n != offered {
		t.Fatalf("sink got %d turns for %d observations", n, offered)
	}
	// Each instance served a contiguous stretch: tags never go back.
	seen := map[int]bool{}
	for _, tag := range tags {
		seen[tag] = true
	}
	for _, tag := range []int{1, 2, 3} {
		if !seen[tag] {
			t.Fatalf("no observation served by the tag-%d instance (tags seen %v)", tag, seen)
		}
	}
	if seen[4] || seen[5] {
		t.Fatalf("a rejected config served observations: %v", seen)
	}
	t.Logf("offered %d observations across 2 swaps and 2 rejected reloads", offered)
}

func waitRejected(t *testing.T, r *Runtime, want uint64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, rej := r.Reloads(); rej >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("invalid config not rejected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An edit made after the set was started but before the watch began (a
// host's Run starts its watch after New started the policies; on a loaded
// machine a quick edit lands in between) is applied: the watch compares
// the file with the running set, and reloads once at its start.
func TestEditBeforeTheWatchBeganIsApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvpilot.yaml")
	if err := os.WriteFile(path, []byte(policiesYAML(1, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, &recorder{}, nil)
	c, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Swap(context.Background(), c.Policies); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(policiesYAML(2, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.WatchConfig(ctx, path, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for applied, _ := r.Reloads(); applied < 1; applied, _ = r.Reloads() {
		if time.Now().After(deadline) {
			t.Fatalf("the edit made before the watch began was never applied (generation %d)", r.Generation())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g := r.Generation(); g != 2 {
		t.Fatalf("generation %d after one edit, want 2", g)
	}
}
