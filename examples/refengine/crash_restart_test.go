package refengine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

const envDaemon = "KVPILOT_REFENGINE_DAEMON"

// maybeDaemonMain runs a host (daemon.New, as `kvpilot serve` does) when
// spawnDaemon started this binary, with the config it passed as JSON. It
// serves until SIGTERM or until its stdin closes. It logs nothing unless
// KVPILOT_TEST_DAEMON_LOG names a level (debug, info...), to stderr.
func maybeDaemonMain() {
	js := os.Getenv(envDaemon)
	if js == "" {
		return
	}
	var c config.Config
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		fmt.Fprintln(os.Stderr, "test daemon: config:", err)
		os.Exit(2)
	}
	log := hclog.NewNullLogger()
	if lvl := os.Getenv("KVPILOT_TEST_DAEMON_LOG"); lvl != "" {
		log = hclog.New(&hclog.LoggerOptions{Name: "daemon", Level: hclog.LevelFromString(lvl), Output: os.Stderr})
	}
	d, err := daemon.New(c, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test daemon:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; cancel() }()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	fmt.Println("ready")
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "test daemon:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// daemonProcess is a host running in a child process.
type daemonProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// spawnDaemon re-executes the test binary as a host on c and waits until
// its sockets are bound.
func spawnDaemon(t *testing.T, c config.Config) *daemonProcess {
	t.Helper()
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), envDaemon+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProcess{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready") {
				close(ready)
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	select {
	case <-ready:
	case <-p.done:
		t.Fatal("test daemon exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("test daemon did not start within 30s")
	}
	return p
}

// kill ends the host with SIGKILL, as a crash would.
func (p *daemonProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// A host killed with SIGKILL at random points while sessions are being
// paused to the disk tier (pages half written, the index and the pins and
// leases never saved) restarts on the same data dir, and every page it
// then serves passes the reference engine's contract check: corrupt or
// partial disk pages are dropped, never served.
func TestKillDuringPauseNeverServesWrongBytes(t *testing.T) {
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	c := restartConfig(t.TempDir())
	c.Tiers.Device.CapacityPages = 256
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	g := &tokens{next: uint32(rng.IntN(1 << 30))}
	t.Logf("token seed %d", g.next)
	var sessions [][]uint32
	loaded, cached, kills, flipped := 0, 0, 0, 0
	for round := 0; ; round++ {
		p := spawnDaemon(t, c)
		e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
		// Every session of the earlier rounds: what comes back is checked
		// row by row by the engine's contract check (e.Turn fails on a
		// wrong row).
		for i, toks := range sessions {
			st, err := e.Turn(ctxT(t), fmt.Sprint("s", i), "", toks)
			if err != nil {
				t.Fatalf("round %d, session %d after the crash: %v", round, i, err)
			}
			loaded += st.LoadedPages
			cached += st.Cached
		}
		if round == rounds {
			_ = e.Close()
			p.kill()
			break
		}
		for range 6 {
			toks := g.take((6 + rng.IntN(6)) * hostPage)
			if _, err := e.Turn(ctxT(t), fmt.Sprint("s", len(sessions)), "", toks); err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, toks)
		}
		ctl := controlFor(t, c)
		// Pause every session, a directive at a time, and kill the host
		// at a random moment of it.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, toks := range sessions {
				// Errors are expected once the host is gone.
				_, _ = ctl.Apply(context.Background(), directive.Turn{Directives: []directive.Directive{
					directive.Pause{BlockHashes: hashesOf(toks, ""), TTL: directive.TTLOf(time.Hour), LeaseID: fmt.Sprintf("r%d-s%d", round, i)},
				}})
			}
		}()
		// Early kills land mid-pause; the last round's leaves the pauses
		// time to write pages, so that some do come back from disk even on
		// a loaded machine (else the test would check nothing).
		delay := time.Duration(rng.IntN(20)) * time.Millisecond
		if round == rounds-1 {
			delay += 300 * time.Millisecond
		}
		time.Sleep(delay)
		p.kill()
		kills++
		wg.Wait()
		flipped += corruptPageFiles(t, c.DataDir, rng, 8)
		_ = ctl.Close()
		_ = e.Close()
	}
	t.Logf("%d kills during pauses, %d bytes of page files flipped, %d sessions re-checked: %d tokens served from cache, %d pages loaded back", kills, flipped, len(sessions), cached, loaded)
	if loaded == 0 {
		t.Fatal("no page came back from the disk tier after a crash: the test checked nothing")
	}
}

// corruptPageFiles flips n random bytes of the disk tier's page files
// (a torn write, a bad sector) while the host is down, and returns how
// many it flipped.
func corruptPageFiles(t *testing.T, dir string, rng *rand.Rand, n int) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.pages"))
	more, _ := filepath.Glob(filepath.Join(dir, "*.pages"))
	files = append(files, more...)
	flipped := 0
	for _, path := range files {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil || fi.Size() == 0 {
			_ = f.Close()
			continue
		}
		for range n {
			off := rng.Int64N(min(fi.Size(), 2<<20)) // where the pages written so far lie
			b := []byte{0}
			if _, err := f.ReadAt(b, off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= byte(1 + rng.IntN(255))
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			flipped++
		}
		_ = f.Close()
	}
	return flipped
}
