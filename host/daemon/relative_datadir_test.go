package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// The host runs with its default, relative data dir, and the engine runs
// from another directory (as the README's tour does): the descriptor
// socket the host names at registration is absolute, so the engine finds
// it and maps the pools.
func TestEngineFromAnotherDirectoryClaimsThePools(t *testing.T) {
	hostDir, engineDir := t.TempDir(), t.TempDir()
	t.Chdir(hostDir)
	c := modelConfig(t)
	c.DataDir = "kvpilot-data"
	startWithEngine(t, c)
	sock := filepath.Join(hostDir, c.EngineSocket())
	if err := os.Chdir(engineDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: sock, EngineID: "elsewhere",
		Layout: enginewire.Layout{Model: "tiny", PageSize: 4, DType: "bf16", Layers: 2,
			Buffers: []enginewire.Buffer{{Name: "k", Heads: 1, HeadDim: 8}, {Name: "v", Heads: 1, HeadDim: 8}},
			Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"}},
		Rope: engineclient.RopeConfig{Base: 10000}})
	if err != nil {
		t.Fatalf("an engine in another directory: %v", err)
	}
	defer cl.Close()
	if !cl.Device().Mapped() {
		t.Fatal("device arena not mapped")
	}
}
