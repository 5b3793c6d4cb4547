package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A model with 256 MiB pages: a few thousand of them are more memory, and
// a few hundred thousand more disk, than any test machine has, while their
// bookkeeping stays small.
var hugeModel = config.Model{Name: "huge", Attention: "mha", DType: "bf16", Layers: 64, KVHeads: 64, HeadDim: 256, RopeDim: 256, RopeStyle: "half_split"}

func hugeLayout() enginewire.Layout {
	return enginewire.Layout{Model: "huge", PageSize: 64, DType: "bf16", Layers: 64,
		Buffers: []enginewire.Buffer{{Name: "k", Heads: 64, HeadDim: 256}, {Name: "v", Heads: 64, HeadDim: 256}},
		Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 256, Style: "half_split"}}
}

// Tier sizes the machine cannot hold are refused at start, naming the key,
// what was asked and what the machine has, as a configuration error.
func TestStartRefusesTiersTheMachineCannotHold(t *testing.T) {
	for _, tc := range []struct {
		key    string
		adjust func(*config.Config)
	}{
		{"tiers.host.capacity_pages", func(c *config.Config) { c.Tiers.Host.CapacityPages = 10_000; c.Tiers.Disk.CapacityPages = 0 }},
		{"tiers.disk.capacity_pages", func(c *config.Config) { c.Tiers.Host.CapacityPages = 1; c.Tiers.Disk.CapacityPages = 1_000_000 }},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c := testConfig(t)
			c.Model = hugeModel
			c.Tiers.Device.CapacityPages = 1
			c.Tiers.Remote.CapacityPages = 0
			tc.adjust(&c)
			d, err := New(c, hclog.NewNullLogger())
			if err == nil {
				d.close()
				t.Fatal("the host started with tiers larger than the machine")
			}
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "available") && !strings.Contains(err.Error(), "free") {
				t.Fatalf("want a configuration error naming %s and what the machine has, got %v", tc.key, err)
			}
		})
	}
}

// A storage path the host cannot make is refused at start, naming the key,
// as a configuration error.
func TestStartRefusesAStoragePathItCannotMake(t *testing.T) {
	c := testConfig(t)
	c.Pools.DiskDir = "/proc/nope/disk"
	_, err := New(c, hclog.NewNullLogger())
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "pools.disk_dir") || !strings.Contains(err.Error(), "/proc/nope/disk") {
		t.Fatalf("want a configuration error naming pools.disk_dir, got %v", err)
	}
}

// Without a model, sizes are known when an engine registers: a layout the
// tiers cannot hold on this machine, or a disk directory gone since the
// start, is refused as misconfigured (not transient), naming the key.
func TestRegistrationRefusedAsMisconfigured(t *testing.T) {
	for _, tc := range []struct {
		key    string
		adjust func(*config.Config)
		after  func(t *testing.T, c config.Config)
	}{
		{key: "tiers.host.capacity_pages", adjust: func(c *config.Config) { c.Tiers.Host.CapacityPages = 10_000 }},
		{key: "tiers.disk.capacity_pages", adjust: func(c *config.Config) { c.Tiers.Disk.CapacityPages = 1_000_000 }},
		{key: "pools.disk_dir", adjust: func(c *config.Config) { c.Pools.DiskDir = filepath.Join(c.DataDir, "pages") },
			after: func(t *testing.T, c config.Config) {
				// The directory turns into a file after the start.
				if err := removeAndWrite(c.Pools.DiskDir); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c := testConfig(t)
			c.Index.PageSize = 64
			c.Tiers.Device.CapacityPages = 1
			c.Tiers.Host.CapacityPages = 1
			c.Tiers.Disk.CapacityPages = 1
			c.Tiers.Remote.CapacityPages = 0
			tc.adjust(&c)
			startWithEngine(t, c)
			if tc.after != nil {
				tc.after(t, c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cl, err := engineclient.Dial(ctx, engineclient.Options{Socket: c.EngineSocket(), EngineID: "test", Layout: hugeLayout(), Rope: engineclient.RopeConfig{Base: 10000}})
			if err == nil {
				cl.Close()
				t.Fatal("registered a layout the tiers cannot hold")
			}
			e, ok := errcode.As(err)
			if !ok || e.Code != errcode.Misconfigured || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("want misconfigured naming %s, got %v", tc.key, err)
			}
		})
	}
}

// removeAndWrite replaces the directory at path with a file.
func removeAndWrite(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return os.WriteFile(path, []byte("not a directory"), 0o600)
}
