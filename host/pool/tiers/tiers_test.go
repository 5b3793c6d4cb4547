package tiers

import (
	"context"
	"errors"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

func TestOpenMemfdSet(t *testing.T) {
	l := layout.MLA("deepseek-tiny", 8, layout.BF16, 2, 32, 8, layout.Interleaved)
	s, err := Open(context.Background(), Options{Layout: &l, DevicePages: 4, DeviceBackend: BackendMemfd,
		HostPages: 8, DiskDir: t.TempDir(), DiskPages: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Backend != BackendMemfd || s.Device.Handle().Kind != pool.HandleMemfd {
		t.Fatalf("backend %s", s.Backend)
	}
	if s.Device.Handle().Arrangement != layout.LayerMajor || s.Host.Handle().Arrangement != layout.PageMajor {
		t.Fatal("device arena should be layer-major, host arena page-major")
	}
	if s.Memory(tier.Host) != s.Host || s.Store(tier.Disk) != s.Disk || s.Store(tier.Remote) != nil {
		t.Fatal("tier lookup")
	}
	if got := s.Disk.Stats().Capacity; got != 16 {
		t.Fatalf("disk capacity %d", got)
	}
}

// TestAutoBackend: auto picks CUDA exactly when a device opens, and a
// configured cuda backend fails clearly without one.
func TestAutoBackend(t *testing.T) {
	l := layout.MHA("m", 4, layout.FP16, 1, 1, 8, 8, layout.Interleaved)
	_, cudaErr := openCUDA(0)
	s, err := Open(context.Background(), Options{Layout: &l, DevicePages: 2, HostPages: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if (cudaErr == nil) != (s.Backend == BackendCUDA) {
		t.Fatalf("auto chose %s, CUDA error %v", s.Backend, cudaErr)
	}
	if cudaErr == nil && !s.Host.Handle().Pinned {
		t.Fatal("host pool not pinned with a GPU present")
	}
	if cudaErr != nil {
		if _, err := Open(context.Background(), Options{Layout: &l, DevicePages: 2, DeviceBackend: BackendCUDA}); err == nil || !errors.Is(err, cudadrv.ErrNoDriver) {
			t.Fatalf("cuda backend without a GPU: %v", err)
		}
	}
	if _, err := ParseBackend("tpu"); err == nil {
		t.Fatal("bad backend accepted")
	}
}
