package preflight

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvpilot/kvpilot/host/config"
)

func hugeConfig(t *testing.T) config.Config {
	c := config.Default()
	c.DataDir = filepath.Join(t.TempDir(), "a", "b")
	c.Model = config.Model{Name: "huge", Attention: "mha", DType: "bf16", Layers: 64, KVHeads: 64, HeadDim: 256, RopeDim: 256}
	c.Tiers.Device.CapacityPages, c.Tiers.Host.CapacityPages, c.Tiers.Disk.CapacityPages = 1, 1, 1
	return c
}

// Check finds what Start finds, and leaves no directory it had to make.
func TestCheckLeavesNothingBehind(t *testing.T) {
	c := hugeConfig(t)
	if err := Check(c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(c.DataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("serve --check left %s: %v", filepath.Dir(c.DataDir), err)
	}
	if err := Start(c); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(c.DiskDir()); err != nil || !fi.IsDir() {
		t.Fatalf("start did not make the disk directory: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		adjust func(*config.Config)
		want   []string
	}{
		{"unmakeable disk_dir", func(c *config.Config) { c.Pools.DiskDir = "/proc/nope/disk" },
			[]string{"pools.disk_dir", "/proc/nope/disk", "cannot make"}},
		{"data_dir under a file", func(c *config.Config) { c.DataDir = filepath.Join(file, "data") },
			[]string{"data_dir", "is not a directory"}},
		{"host tier", func(c *config.Config) { c.Tiers.Host.CapacityPages = 10_000 },
			[]string{"tiers.host.capacity_pages", "10000 pages", "available", "lower tiers.host.capacity_pages to at most"}},
		{"device tier in memory", func(c *config.Config) { c.Pools.DeviceBackend = "memfd"; c.Tiers.Device.CapacityPages = 10_000 },
			[]string{"tiers.device.capacity_pages", "available"}},
		{"disk tier", func(c *config.Config) { c.Tiers.Disk.CapacityPages = 1_000_000 },
			[]string{"tiers.disk.capacity_pages", "1000000 pages", "free", "at most"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hugeConfig(t)
			tc.adjust(&c)
			err := Check(c)
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("want a configuration error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q does not say %q", err, w)
				}
			}
		})
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{800: "800 B", 8 << 20: "8.0 MiB", 3 << 40: "3.0 TiB", 1536: "1.5 KiB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}
