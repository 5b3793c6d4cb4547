package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
)

// recorder is a Sink that remembers every turn.
type recorder struct {
	mu    sync.Mutex
	turns []directive.Turn
}

func (r *recorder) Apply(_ context.Context, t directive.Turn) error {
	r.mu.Lock()
	r.turns = append(r.turns, t)
	r.mu.Unlock()
	return nil
}

// seqs returns, per session, the Seq of every echoed observation in the
// order the sink received them, and the tags seen per Seq.
func (r *recorder) seqs() (map[string][]uint64, map[uint64]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]uint64{}
	tags := map[uint64]int{}
	for _, t := range r.turns {
		for _, d := range t.Directives {
			if rt, ok := d.(directive.Retain); ok {
				out[rt.Session] = append(out[rt.Session], uint64(rt.End))
				tags[uint64(rt.End)] = rt.Priority
			}
		}
	}
	return out, tags
}

func newRuntime(t *testing.T, sink Sink, mod func(*Options)) *Runtime {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Executable: exe, Sink: sink, Logger: testLogger(t), BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func request(session string, turn int) policy.Observation {
	return policy.Observation{Kind: policy.KindRequestStarted, Session: session, Tenant: "t1", Time: time.Unix(1700000000, 0),
		Started: &policy.RequestStarted{RequestID: fmt.Sprintf("%s/%d", session, turn), Turn: int64(turn)}}
}

// checkOrdered fails unless every session's Seqs rose strictly (in order,
// no duplicates).
func checkOrdered(t *testing.T, got map[string][]uint64) {
	t.Helper()
	for s, seqs := range got {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("session %s: seq %d delivered after %d", s, seqs[i], seqs[i-1])
			}
		}
	}
}

func checkAccounted(t *testing.T, st Stats) {
	t.Helper()
	if st.Pending != 0 || st.Accepted != st.Delivered+st.DroppedTotal() {
		t.Fatalf("observations unaccounted for: %+v", st)
	}
}

func TestOrderedDeliveryThroughPluginProcess(t *testing.T) {
	rec := &recorder{}
	r := newRuntime(t, rec, nil)
	if err := r.Swap(context.Background(), []config.Policy{{Name: "echo-1", Builtin: "echo", Params: map[string]any{"tag": 7}}}); err != nil {
		t.Fatal(err)
	}
	const sessions, per = 8, 250
	for i := 0; i < per; i++ {
		for s := 0; s < sessions; s++ {
			if err := r.Observe(request(fmt.Sprintf("s%d", s), i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// KV events are not subscribed: they must not count.
	_ = r.Observe(policy.Observation{Kind: policy.KindKVEvent, KV: &policy.KVEvent{Type: policy.KVStored, Tier: "device"}})
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()["echo-1"]
	checkAccounted(t, st)
	if st.Delivered != sessions*per || st.DroppedTotal() != 0 {
		t.Fatalf("stats %+v, want %d delivered and none dropped", st, sessions*per)
	}
	got, tags := rec.seqs()
	checkOrdered(t, got)
	for s := 0; s < sessions; s++ {
		if n := len(got[fmt.Sprintf("s%d", s)]); n != per {
			t.Fatalf("session s%d: %d turns, want %d", s, n, per)
		}
	}
	for seq, tag := range tags {
		if tag != 7 {
			t.Fatalf("seq %d answered with tag %d: params not configured", seq, tag)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.turns[0].Source != "echo-1" || rec.turns[0].Tenant != "t1" {
		t.Fatalf("turn source %q tenant %q, want echo-1 and t1", rec.turns[0].Source, rec.turns[0].Tenant)
	}
}

func TestKilledPluginIsRestartedAndNothingIsLost(t *testing.T) {
	rec := &recorder{}
	m := metrics.New()
	r := newRuntime(t, rec, func(o *Options) { o.Metrics = m; o.MaxAttempts = 3; o.QueueSize = 1 << 16 })
	if err := r.Swap(context.Background(), []config.Policy{{Name: "echo", Builtin: "echo"}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var offered int
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := r.Observe(request(fmt.Sprintf("s%d", i%16), i)); err != nil {
				t.Error(err)
				return
			}
			offered++
			if i%8 == 0 {
				time.Sleep(time.Millisecond) // a steady stream, not a flood
			}
		}
	}()
	const kills = 20
	for k := 0; k < kills; k++ {
		pid := waitPID(t, r, "echo", 0)
		time.Sleep(20 * time.Millisecond) // let observations flow to it
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
		waitPID(t, r, "echo", pid) // a new process took over
	}
	close(stop)
	wg.Wait()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()["echo"]
	checkAccounted(t, st)
	if st.Accepted != uint64(offered) {
		t.Fatalf("accepted %d of %d offered", st.Accepted, offered)
	}
	if st.Restarts < kills {
		t.Fatalf("%d restarts after %d kills", st.Restarts, kills)
	}
	var mv dto.Metric
	if err := m.PluginRestarts.WithLabelValues("echo").Write(&mv); err != nil {
		t.Fatal(err)
	}
	if n := mv.GetCounter().GetValue(); n < kills {
		t.Fatalf("kvpilot_plugin_restarts_total = %v, want >= %d", n, kills)
	}
	got, _ := rec.seqs()
	checkOrdered(t, got)
	var turns uint64
	for _, s := range got {
		turns += uint64(len(s))
	}
	if turns != st.Delivered {
		t.Fatalf("sink got %d turns for %d delivered observations", turns, st.Delivered)
	}
	t.Logf("offered %d, delivered %d, dropped %v, restarts %d", offered, st.Delivered, st.Dropped, st.Restarts)
}

// waitPID waits until policy name runs a process other than not.
func waitPID(t *testing.T, r *Runtime, name string, not int) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if pid := r.PIDs()[name]; pid != 0 && pid != not {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("policy %s: no process other than %d", name, not)
	return 0
}

func TestHungPluginHitsItsDeadline(t *testing.T) {
	rec := &recorder{}
	r := newRuntime(t, rec, func(o *Options) { o.CallTimeout = 300 * time.Millisecond })
	if err := r.Swap(context.Background(), []config.Policy{{Name: "hang", Builtin: "hang"}}); err != nil {
		t.Fatal(err)
	}
	first := r.PIDs()["hang"]
	for _, s := range []string{"a", "hang", "b"} {
		if err := r.Observe(request(s, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()["hang"]
	checkAccounted(t, st)
	if st.Dropped[DropFailed] != 1 || st.Delivered != 2 || st.Restarts < 1 {
		t.Fatalf("stats %+v: want the hung observation dropped as failed, the others delivered, a restart", st)
	}
	got, _ := rec.seqs()
	if len(got["a"]) != 1 || len(got["b"]) != 1 || len(got["hang"]) != 0 {
		t.Fatalf("sink got %v", got)
	}
	if err := syscall.Kill(first, 0); err == nil {
		t.Fatalf("hung plugin %d still alive", first)
	}
}

func TestExternalPluginVerifiedBySHA256(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "echo-plugin")
	copyFile(t, exe, bin)
	sum := fileSHA256(t, bin)

	rec := &recorder{}
	r := newRuntime(t, rec, func(o *Options) { o.Env = []string{"KVPILOT_TEST_SERVE=echo"} })
	good := []config.Policy{{Name: "ext", Path: bin, SHA256: sum}}
	if err := r.Swap(context.Background(), good); err != nil {
		t.Fatalf("verified plugin refused: %v", err)
	}
	if err := r.Observe(request("s", 0)); err != nil {
		t.Fatal(err)
	}

	// Tamper with a copy: its digest no longer matches.
	bad := filepath.Join(dir, "tampered")
	copyFile(t, exe, bad)
	f, err := os.OpenFile(bad, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte{0})
	f.Close()
	err = r.Swap(context.Background(), []config.Policy{{Name: "ext", Path: bad, SHA256: sum}})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("tampered plugin: err %v, want ErrStart about the checksum", err)
	}
	if got := r.Policies(); len(got) != 1 || r.Generation() != 1 {
		t.Fatalf("after a refused swap: policies %v generation %d, want the old set", got, r.Generation())
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := rec.seqs(); len(got["s"]) != 1 {
		t.Fatalf("verified plugin answered %v", got)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
