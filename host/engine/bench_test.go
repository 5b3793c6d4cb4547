package engine_test

import (
	"context"
	"testing"

	"github.com/kvpilot/kvpilot/host/engine/enginetest"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// BenchmarkRequestRoundTrip is one cached request over the engine socket:
// Match of a 1024-token prompt (64 pages, all on the device), Commit of the
// same pages, Finish. It is the protocol's overhead per request.
func BenchmarkRequestRoundTrip(b *testing.B) {
	h, err := enginetest.Start(enginetest.Options{Dir: b.TempDir(), DevicePages: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	c, err := engineclient.Dial(ctx, engineclient.Options{Socket: h.Socket, Layout: gqa(16), Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	toks := seq(1, 1024)
	m, _ := c.Match(ctx, engineclient.MatchRequest{Tokens: toks})
	slots, _ := c.Allocate(ctx, m.RequestID, 64)
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		b.Fatal(err)
	}
	_, _ = c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := c.Match(ctx, engineclient.MatchRequest{Tokens: toks})
		if err != nil || m.CachedTokens != 1024 {
			b.Fatalf("match: %d %v", m.CachedTokens, err)
		}
		if _, err := c.Commit(ctx, m.RequestID, toks, m.PageSlots); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID}); err != nil {
			b.Fatal(err)
		}
	}
}
