package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/examples/refengine"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// gate admits requests while the tokens of those running fit a budget, as
// an engine's scheduler admits a request only when its KV fits in device
// memory. Clients beyond it wait in line: concurrency 128 is the number of
// clients, not of requests holding device pages at once.
type gate struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int
	inUse int
}

func newGate(limit int) *gate {
	g := &gate{limit: max(1, limit)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// acquire takes n tokens of budget; a request larger than the whole budget
// takes all of it, so it runs alone.
func (g *gate) acquire(n int) int {
	n = min(n, g.limit)
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.inUse+n > g.limit {
		g.cond.Wait()
	}
	g.inUse += n
	return n
}

func (g *gate) release(n int) {
	g.mu.Lock()
	g.inUse -= n
	g.mu.Unlock()
	g.cond.Broadcast()
}

// TurnTimeout bounds one request, so a host that never answers (a splice
// waiting on a fill the engine does not serve) fails the scenario instead
// of hanging it.
var TurnTimeout = 60 * time.Second

// runTurn runs one request on the engine, through the gate when there is
// one. A request refused for want of free device pages (every page held by
// running requests or not yet evicted) waits and tries again, as a
// scheduler would requeue it.
func runTurn(ctx context.Context, e *refengine.Engine, g *gate, r refengine.TurnRequest) (refengine.TurnStats, error) {
	if g != nil {
		n := g.acquire(len(r.Tokens) + len(r.Output))
		defer g.release(n)
	}
	for attempt := 0; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, TurnTimeout)
		st, err := e.Run(tctx, r)
		cancel()
		if err == nil {
			return st, nil
		}
		if e, ok := errcode.As(err); !ok || e.Code != errcode.CapacityExhausted || attempt >= 50 {
			return st, fmt.Errorf("session %s: %w", r.Session, err)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 2 * time.Millisecond):
		}
	}
}
