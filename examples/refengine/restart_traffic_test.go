package refengine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
)

// The host is killed (SIGKILL: no goodbye, sockets reset mid-call) and
// comes back while the engine keeps sending requests: requests cut by it
// are run again (re-registering first), so the engine never sees an error
// and never exits, and it ends on the new host. A graceful stop hid the
// missing retry: its requests ended with "host restarted", retried once.
func TestEngineRidesThroughHostRestart(t *testing.T) {
	c := restartConfig(t.TempDir())
	host := spawnDaemon(t, c)
	e := newEngine(t, c.EngineSocket(), refengine.GQA(hostPage))
	boot := e.Client().Registration().BootID

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	turns := make(chan int, 1000)
	wg.Add(1)
	go func() {
		defer wg.Done()
		g := &tokens{next: 7}
		for i := 0; ctx.Err() == nil; i++ {
			if _, err := e.Turn(ctx, "s", "", g.take(3*hostPage+5)); err != nil {
				errs <- err
				return
			}
			turns <- i
		}
	}()
	waitTurns := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-turns:
			case err := <-errs:
				t.Fatalf("the engine failed a request: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("the engine made no progress")
			}
		}
	}
	waitTurns(5)
	host.kill()
	time.Sleep(150 * time.Millisecond) // requests meet a host that is gone
	spawnDaemon(t, c)
	waitTurns(5)
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		if ctx.Err() == nil {
			t.Fatalf("the engine failed a request: %v", err)
		}
	default:
	}
	if reg := e.Client().Registration(); reg.BootID == boot {
		t.Fatalf("the engine never registered with the new host: %+v", reg)
	}
}
