package splice

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/pool/cuda"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/kernels"
	kcuda "github.com/kvpilot/kvpilot/kernels/cuda"
	"github.com/kvpilot/kvpilot/kernels/rope"
)

// DeviceForPools adapts the device pool of an opened pool set with the
// kernels that can reach its memory: the CPU kernels for a memfd arena
// (this process maps it), the CUDA kernels for a CUDA arena. rc is the
// model's RoPE config from the engine's registration. The returned close
// releases the kernels (the CUDA module); call it when the splicer is
// replaced or the pools close.
func DeviceForPools(set *tiers.Set, rc rope.Config) (*Device, func() error, error) {
	none := func() error { return nil }
	if set == nil || set.Device == nil {
		return nil, none, fmt.Errorf("splice device: no device pool: %w", ErrNoDevice)
	}
	switch a := set.Device.(type) {
	case *memfd.Arena:
		d, err := NewDevice(a, Memory{Host: a.Bytes()}, rc, kernels.NewCPU())
		return d, none, err
	case *cuda.Arena:
		if set.CUDA == nil {
			return nil, none, fmt.Errorf("splice device: a CUDA arena without its context: %w", ErrUnsupported)
		}
		eng, err := kcuda.New(set.CUDA)
		if err != nil {
			return nil, none, fmt.Errorf("splice device: %w", err)
		}
		d, err := NewDevice(a, Memory{Device: a.Base()}, rc, eng)
		if err != nil {
			_ = eng.Close()
			return nil, none, err
		}
		return d, eng.Close, nil
	}
	return nil, none, fmt.Errorf("splice device: device pool %T: %w", set.Device, ErrUnsupported)
}
