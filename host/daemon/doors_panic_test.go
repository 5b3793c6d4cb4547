//go:build invariants

package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A panic inside the index while a door's call holds it (injected after the
// index's Pin, or its Match for the engine socket) is answered as internal
// on that door, and the same call sent next is served: the index lock is
// released and the turn's journal rolled back on the way up, whichever
// door it came in by: the Control socket, NATS, the policy sink, the front
// door's directives and the engine socket.
func TestEveryDoorServesTheNextCallAfterAPanicInTheIndex(t *testing.T) {
	c := modelConfig(t)
	d := startWithEngine(t, c)
	tr := dialTransports(t, d, "panic")
	h, _ := commitPages(t, d, "acme", []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	pin := directive.Turn{Tenant: "acme", Directives: []directive.Directive{
		directive.Cache{BlockHashes: isoHashes(h.Sequence...), Pin: true, TTL: directive.TTLOf(time.Hour)}}}
	arm := func(method string) { d.Index().Do(func(ix *cache.Index) { ix.PanicAfterNext(method) }) }
	pins := 0
	for _, door := range directiveDoors(t, d, tr) {
		arm("Pin")
		if r := door.apply(pin); r.OK() || r.Error == nil || r.Error.Code != errcode.Internal {
			t.Fatalf("%s: the turn that panicked answered %+v, want internal", door.name, r)
		}
		if p, _ := pageInfo(d, "acme", h.Sequence[0]); p.PinCount != pins {
			t.Fatalf("%s: pin count %d after the turn that panicked, want %d (rolled back)", door.name, p.PinCount, pins)
		}
		if r := door.apply(pin); !r.OK() {
			t.Fatalf("%s: the turn after the panic: %+v", door.name, r)
		}
		pins++
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "panic", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	arm("Match")
	if _, err := cl.Match(ctx, engineclient.MatchRequest{Session: "s", Tenant: "acme", Tokens: []uint32{1, 2, 3, 4}}); errcode.From(err).Code != errcode.Internal {
		t.Fatalf("engine: the Match that panicked answered %v, want internal", err)
	}
	if m := engineTurn(t, cl, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, ""); m.CachedTokens != 8 {
		t.Fatalf("engine: the Match after the panic hit %d tokens, want 8", m.CachedTokens)
	}
}
