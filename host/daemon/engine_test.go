package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// startWithEngine runs a host with its Engine service (building and running
// it here when daemon.go does not yet).
func startWithEngine(t *testing.T, c config.Config) *Daemon {
	t.Helper()
	d, err := New(c, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if d.engineHost() == nil {
		if err := d.buildEngine(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	d.runEngine(ctx, &wg)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("host did not stop within 10s")
		}
	})
	return d
}

// tinyLayout is modelConfig's model as the engine registers it.
func tinyLayout() enginewire.Layout {
	return enginewire.Layout{Model: "tiny", PageSize: 4, DType: "bf16", Layers: 2,
		Buffers: []enginewire.Buffer{{Name: "k", Heads: 1, HeadDim: 8}, {Name: "v", Heads: 1, HeadDim: 8}},
		Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"}}
}

func engineTurn(t *testing.T, c *engineclient.Client, toks []uint32, cc string) engineclient.MatchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Match(ctx, engineclient.MatchRequest{Session: "s", Tenant: "acme", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	slots := append([]uint32(nil), m.PageSlots...)
	if need := len(toks)/4 - len(slots); need > 0 {
		got, err := c.Allocate(ctx, m.RequestID, need)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, got...)
	}
	if _, err := c.Commit(ctx, m.RequestID, toks, slots); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx, engineclient.FinishRequest{RequestID: m.RequestID, CacheControlJSON: cc}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEngineServiceOnTheHost(t *testing.T) {
	for _, configured := range []bool{true, false} {
		name := "pools-at-register"
		if configured {
			name = "configured-model"
		}
		t.Run(name, func(t *testing.T) {
			c := modelConfig(t)
			if !configured {
				c.Model.Name = ""
			}
			d := startWithEngine(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "test", Layout: tinyLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
			if m := engineTurn(t, cl, toks, ""); m.CachedTokens != 0 {
				t.Fatalf("first turn cached %d", m.CachedTokens)
			}
			if m := engineTurn(t, cl, toks, `{"nvext":{"cache_control":{"type":"ephemeral","ttl":"5m"}}}`); m.CachedTokens != 12 {
				t.Fatalf("second turn cached %d", m.CachedTokens)
			}
			h := blockid.Compute(toks, 4, blockid.Salt{Namespace: "acme"})
			info, ok := pageInfo(d, "acme", h.Sequence[2])
			if !ok || info.PinCount != 1 || info.PinTTL != 5*time.Minute {
				t.Fatalf("pinned page: %+v %v", info, ok)
			}
		})
	}
}
