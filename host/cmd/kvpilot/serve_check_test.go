package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve --check checks what the host checks at start against the machine:
// storage paths it cannot make, and tier sizes larger than the memory or
// the disk there is, each refused naming the key (exit 1).
func TestServeCheckChecksTheMachine(t *testing.T) {
	dir := t.TempDir()
	model := "model: {name: huge, attention: mha, dtype: bf16, layers: 64, kv_heads: 64, head_dim: 256, rope_dim: 256}\n"
	for _, tc := range []struct {
		yaml, key string
	}{
		{"pools: {disk_dir: /proc/nope/disk}\n", "pools.disk_dir"},
		{model + "tiers: {device: {capacity_pages: 1}, host: {capacity_pages: 10000}, disk: {capacity_pages: 1}}\n", "tiers.host.capacity_pages"},
		{model + "tiers: {device: {capacity_pages: 1}, host: {capacity_pages: 1}, disk: {capacity_pages: 1000000}}\n", "tiers.disk.capacity_pages"},
	} {
		path := filepath.Join(dir, "kvpilot.yaml")
		if err := os.WriteFile(path, []byte("data_dir: "+filepath.Join(dir, "data")+"\n"+tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"serve", "--check", "--config", path}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), tc.key) {
			t.Fatalf("serve --check with %q: %d %q", tc.yaml, code, errb.String())
		}
	}
}
