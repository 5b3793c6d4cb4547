package refengine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/host/engine/enginetest"
)

// The host runs in a child process (this test binary re-executed): engine
// and host share KV bytes only through the descriptors passed on the socket.
func TestMain(m *testing.M) {
	enginetest.MaybeHostMain()
	maybePolicyMain() // the binary also stands in for `kvpilot policy NAME` (host_test.go)
	maybeDaemonMain() // and for `kvpilot serve` in a child process (crash_restart_test.go)
	os.Exit(m.Run())
}

func spawn(t *testing.T, o enginetest.Options) *enginetest.Process {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	p, err := enginetest.Spawn(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

func newEngine(t *testing.T, socket string, m refengine.Model) *refengine.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := refengine.New(ctx, refengine.Config{Socket: socket, EngineID: t.Name(), Model: m, Cost: refengine.DefaultCost, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type tokens struct{ next uint32 }

func (g *tokens) take(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = g.next
		g.next = g.next*1103515245 + 12345
	}
	return out
}

// conversation runs turns of a session whose prompt grows by the previous
// answer and a new user message, and returns each turn's stats.
func conversation(t *testing.T, e *refengine.Engine, session string, g *tokens, turns, user, answer int) []refengine.TurnStats {
	t.Helper()
	var prompt []uint32
	var out []refengine.TurnStats
	for i := 0; i < turns; i++ {
		prompt = append(prompt, g.take(user)...)
		ans := g.take(answer)
		st, err := e.Run(ctxT(t), refengine.TurnRequest{Session: session, Tokens: prompt, Output: ans})
		if err != nil {
			t.Fatalf("%s turn %d: %v", session, i, err)
		}
		out = append(out, st)
		prompt = append(prompt, ans...)
	}
	return out
}

func TestSecondTurnHitsAcrossProcesses(t *testing.T) {
	for _, m := range []refengine.Model{refengine.GQA(16), refengine.MLA(16)} {
		t.Run(m.Attention, func(t *testing.T) {
			p := spawn(t, enginetest.Options{PageSize: 16, DevicePages: 128})
			e := newEngine(t, p.Socket, m)
			g := &tokens{next: 7}
			sts := conversation(t, e, "s", g, 3, 40, 20)
			if sts[0].Cached != 0 {
				t.Fatalf("first turn cached %d", sts[0].Cached)
			}
			for i := 1; i < len(sts); i++ {
				// Everything of the previous turn's full pages (prompt and
				// answer) is cached.
				prev := sts[i-1].Prompt + 20
				if want := prev / 16 * 16; sts[i].Cached != want {
					t.Fatalf("turn %d cached %d of %d, want %d", i, sts[i].Cached, sts[i].Prompt, want)
				}
				if sts[i].CheckedRows == 0 || sts[i].RoundedRows != 0 {
					t.Fatalf("turn %d: checked %d rows, %d rounded (nothing rotated them)", i, sts[i].CheckedRows, sts[i].RoundedRows)
				}
				if sts[i].TTFTms >= sts[0].TTFTms*float64(sts[i].Prompt)/float64(sts[0].Prompt) {
					t.Fatalf("turn %d ttft %.1f ms not below a cold prefill", i, sts[i].TTFTms)
				}
			}
		})
	}
}

// A session evicted from the device by other traffic comes back from the
// host tier at its next turn, with the same bytes.
func TestLoadBackAfterEviction(t *testing.T) {
	p := spawn(t, enginetest.Options{PageSize: 16, DevicePages: 24, HostPages: 512})
	e := newEngine(t, p.Socket, refengine.GQA(16))
	g := &tokens{next: 99}
	vip := g.take(16 * 6)
	if _, err := e.Turn(ctxT(t), "vip", "", vip); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the write-through copy land
	for i := 0; i < 12; i++ {
		if _, err := e.Turn(ctxT(t), fmt.Sprintf("flood-%d", i), "", g.take(16*5)); err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
	}
	st, err := e.Turn(ctxT(t), "vip", "", vip)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cached != len(vip) || st.LoadedPages == 0 || st.LoadedBytes == 0 {
		t.Fatalf("vip after the flood: cached %d of %d, loaded %d pages (%d bytes)", st.Cached, len(vip), st.LoadedPages, st.LoadedBytes)
	}
	if st.CheckedRows != len(vip)*2*2 {
		t.Fatalf("checked %d rows", st.CheckedRows)
	}
	cold := refengine.DefaultCost.TTFT(len(vip), 0)
	if st.TTFTms >= cold {
		t.Fatalf("load-back ttft %.2f ms not below a re-prefill's %.2f", st.TTFTms, cold)
	}
}

// The host restarts under the engine: its next turn finds its registration
// unknown, registers again with the new host and re-runs the request.
func TestHostRestartReregisters(t *testing.T) {
	dir := t.TempDir()
	o := enginetest.Options{Dir: dir, PageSize: 16, DevicePages: 64}
	p := spawn(t, o)
	e := newEngine(t, p.Socket, refengine.GQA(16))
	g := &tokens{next: 5}
	prompt := g.take(64)
	if _, err := e.Turn(ctxT(t), "s", "", prompt); err != nil {
		t.Fatal(err)
	}
	boot := e.Client().Registration().BootID
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	p2 := spawn(t, o)
	if p2.BootID == p.BootID {
		t.Fatal("the restarted host kept its boot id")
	}
	st, err := e.Turn(ctxT(t), "s", "", prompt)
	if err != nil {
		t.Fatalf("turn after the host restart: %v", err)
	}
	reg := e.Client().Registration()
	if reg.BootID == boot || reg.BootID != p2.BootID || reg.Generation != 2 {
		t.Fatalf("registration after restart: %+v (old boot %s, new %s)", reg, boot, p2.BootID)
	}
	if st.Cached != 0 {
		t.Fatalf("a host that lost its memory served %d cached tokens", st.Cached)
	}
	st, err = e.Turn(ctxT(t), "s", "", prompt)
	if err != nil || st.Cached != 64 {
		t.Fatalf("second turn on the new host: cached %d, %v", st.Cached, err)
	}
}

// A restarted engine re-attaches to the same pools and finds the pages its
// previous incarnation committed.
func TestEngineRestartReattaches(t *testing.T) {
	p := spawn(t, enginetest.Options{PageSize: 16, DevicePages: 64})
	g := &tokens{next: 11}
	prompt := g.take(80)
	e1 := newEngine(t, p.Socket, refengine.MLA(16))
	if _, err := e1.Turn(ctxT(t), "s", "", prompt); err != nil {
		t.Fatal(err)
	}
	// The first engine dies mid-request: matched and allocated, never
	// released.
	m, err := e1.Client().Match(ctxT(t), engineclientMatch("s", prompt))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Client().Allocate(ctxT(t), m.RequestID, 3); err != nil {
		t.Fatal(err)
	}
	_ = e1.Close()

	e2 := newEngine(t, p.Socket, refengine.MLA(16))
	reg := e2.Client().Registration()
	if !reg.Reattached || reg.CachedPages != 5 {
		t.Fatalf("re-registration: %+v", reg)
	}
	st, err := e2.Turn(ctxT(t), "s", "", append(prompt, g.take(10)...))
	if err != nil || st.Cached != 80 {
		t.Fatalf("restarted engine: cached %d, %v", st.Cached, err)
	}
	// The dead engine's request was released with its registration.
	if _, err := e2.Client().Release(ctxT(t), m.RequestID); err == nil {
		t.Fatal("the old registration's request is still live")
	}
	// A different layout is refused while pages are cached.
	ctx := ctxT(t)
	if _, err := refengine.New(ctx, refengine.Config{Socket: p.Socket, Model: refengine.GQA(16)}); err == nil || !errors.Is(err, errLayoutConflict) {
		t.Fatalf("other layout: %v", err)
	}
}

// The contract check fails a turn whose cached keys are not what a prefill
// at their positions writes: here one byte of V, and one rotary element of
// K moved by far more than round-off.
func TestContractCatchesCorruption(t *testing.T) {
	p := spawn(t, enginetest.Options{PageSize: 16, DevicePages: 64})
	e := newEngine(t, p.Socket, refengine.GQA(16))
	g := &tokens{next: 3}
	prompt := g.take(48)
	if _, err := e.Turn(ctxT(t), "s", "", prompt); err != nil {
		t.Fatal(err)
	}
	m, err := e.Client().Match(ctxT(t), engineclientMatch("probe", prompt))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Release(ctxT(t), m.RequestID); err != nil {
		t.Fatal(err)
	}
	dev := e.Client().Device()
	for _, c := range []struct {
		name     string
		buf, off int
	}{{"v", 1, 5 * 4}, {"k rope", 0, 3 * 4}} {
		row, err := dev.Row(int(m.PageSlots[1]), 1, c.buf, 2)
		if err != nil {
			t.Fatal(err)
		}
		saved := append([]byte(nil), row...)
		row[c.off+2] ^= 0x40 // a large change in the exponent's neighbourhood
		_, err = e.Turn(ctxT(t), "s", "", prompt)
		copy(row, saved)
		if !errors.Is(err, refengine.ErrContract) {
			t.Fatalf("%s corrupted: %v", c.name, err)
		}
	}
	if _, err := e.Turn(ctxT(t), "s", "", prompt); err != nil {
		t.Fatalf("restored bytes: %v", err)
	}
}

// Sessions running at once, on a device small enough that they evict each
// other: every turn succeeds, every cached key passes the contract, and the
// sessions' later turns hit.
func TestConcurrentSessions(t *testing.T) {
	p := spawn(t, enginetest.Options{PageSize: 16, DevicePages: 48, HostPages: 1024})
	e := newEngine(t, p.Socket, refengine.GQA(16))
	const sessions, turns = 8, 4
	errs := make(chan error, sessions)
	hits := make(chan int, sessions)
	for s := 0; s < sessions; s++ {
		go func(s int) {
			g := &tokens{next: uint32(1000 * (s + 1))}
			var prompt []uint32
			cached := 0
			for i := 0; i < turns; i++ {
				prompt = append(prompt, g.take(24)...)
				ans := g.take(8)
				st, err := e.Run(ctxT(t), refengine.TurnRequest{Session: fmt.Sprint("c", s), Tokens: prompt, Output: ans})
				if err != nil {
					errs <- fmt.Errorf("session %d turn %d: %w", s, i, err)
					return
				}
				cached += st.Cached
				prompt = append(prompt, ans...)
			}
			hits <- cached
			errs <- nil
		}(s)
	}
	for s := 0; s < sessions; s++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if c := <-hits; c == 0 {
			t.Fatal("a session never hit the cache")
		}
	}
	if tot := e.Totals(); tot.Turns != sessions*turns || tot.CheckedRows == 0 {
		t.Fatalf("totals %+v", tot)
	}
}
