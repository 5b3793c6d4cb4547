// Package tiers opens the pools of all four tiers for one layout from
// plain options: it picks the device backend (CUDA when the driver loads,
// memfd otherwise, or as configured), pins the host arena for DMA when a GPU
// is present, and closes everything in order.
package tiers

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/cuda"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/pool/remote"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

// Backend selects the device tier's memory.
type Backend string

const (
	// BackendAuto uses CUDA when cudadrv.Load succeeds, memfd otherwise.
	BackendAuto Backend = "auto"
	// BackendMemfd is the shared-memory device arena (no GPU).
	BackendMemfd Backend = "memfd"
	// BackendCUDA requires a GPU and fails without one.
	BackendCUDA Backend = "cuda"
)

// ParseBackend reads auto, memfd or cuda.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case BackendAuto, BackendMemfd, BackendCUDA:
		return b, nil
	case "":
		return BackendAuto, nil
	}
	return "", fmt.Errorf("unknown device backend %q: want auto, memfd or cuda", s)
}

// Options size and place the pools. A tier with zero pages (or, for
// remote, no JetStream) is absent.
type Options struct {
	Layout *layout.Layout

	DevicePages   int
	DeviceBackend Backend
	DeviceOrdinal int
	HostPages     int

	DiskDir          string
	DiskPages        int
	DiskFsync        disk.FsyncPolicy
	DiskVerifyOnOpen bool

	// RemoteBackend enables the remote tier on this backend (Redis, or a
	// JetStream object store built by the caller); else RemoteJS enables
	// it on a JetStream object store on that connection.
	RemoteBackend remote.Backend
	// RemoteJS enables the remote tier on this JetStream connection.
	RemoteJS       jetstream.JetStream
	RemoteBucket   string
	RemoteMaxBytes int64
	RemoteReplicas int

	Logger hclog.Logger
}

// Set is one layout's pools. Absent tiers are nil.
type Set struct {
	Device pool.Memory
	Host   pool.Memory
	Disk   pool.Store
	Remote pool.Store
	// Backend is the device backend chosen.
	Backend Backend
	// CUDA is the device context when the CUDA backend runs.
	CUDA *cudadrv.Context
}

// Open opens every configured pool; on error, those already open are closed.
func Open(ctx context.Context, o Options) (*Set, error) {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("pools")
	if o.Layout == nil {
		return nil, fmt.Errorf("open pools: no layout")
	}
	if err := o.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("open pools: %w", err)
	}
	s := &Set{}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if o.DevicePages > 0 {
		if err := s.openDevice(o, log); err != nil {
			return nil, err
		}
	}
	if o.HostPages > 0 {
		h, err := memfd.New(memfd.Options{Tier: tier.Host, Layout: o.Layout, Pages: o.HostPages, Arrangement: layout.PageMajor})
		if err != nil {
			return nil, fmt.Errorf("open host pool: %w", err)
		}
		s.Host = h
		if s.CUDA != nil {
			c := s.CUDA
			if err := h.Register(func(b []byte) error { return c.HostRegister(b, cudadrv.HostRegisterPortable) }, c.HostUnregister); err != nil {
				return nil, fmt.Errorf("open host pool: %w", err)
			}
		}
		log.Info("host pool", "pages", o.HostPages, "bytes", h.Handle().Size, "pinned", s.CUDA != nil)
	}
	if o.DiskPages > 0 {
		d, err := disk.Open(disk.Options{Dir: o.DiskDir, Layout: o.Layout, Pages: o.DiskPages, Fsync: o.DiskFsync,
			VerifyOnOpen: o.DiskVerifyOnOpen, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open disk pool: %w", err)
		}
		s.Disk = d
	}
	if o.RemoteJS != nil || o.RemoteBackend != nil {
		r, err := remote.Open(ctx, remote.Options{Backend: o.RemoteBackend, JS: o.RemoteJS, Bucket: o.RemoteBucket, Layout: o.Layout,
			MaxBytes: o.RemoteMaxBytes, Replicas: o.RemoteReplicas, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("open remote pool: %w", err)
		}
		s.Remote = r
	}
	ok = true
	return s, nil
}

func (s *Set) openDevice(o Options, log hclog.Logger) error {
	b := o.DeviceBackend
	if b == "" {
		b = BackendAuto
	}
	if _, err := ParseBackend(string(b)); err != nil {
		return fmt.Errorf("open device pool: %w", err)
	}
	if b != BackendMemfd {
		c, err := openCUDA(o.DeviceOrdinal)
		switch {
		case err == nil:
			s.CUDA = c
			a, err := cuda.New(cuda.Options{Context: c, Layout: o.Layout, Pages: o.DevicePages, Arrangement: layout.LayerMajor})
			if err != nil {
				return fmt.Errorf("open device pool: %w", err)
			}
			s.Device, s.Backend = a, BackendCUDA
			log.Info("device pool: CUDA", "device", c.Device().Name, "ordinal", o.DeviceOrdinal,
				"pages", o.DevicePages, "bytes", a.Handle().Size, "requested", string(b))
			return nil
		case b == BackendCUDA:
			return fmt.Errorf("open device pool: backend cuda was configured: %w", err)
		default:
			log.Info("no usable GPU, device pool falls back to memfd", "reason", err.Error())
		}
	}
	a, err := memfd.New(memfd.Options{Tier: tier.Device, Layout: o.Layout, Pages: o.DevicePages, Arrangement: layout.LayerMajor})
	if err != nil {
		return fmt.Errorf("open device pool: %w", err)
	}
	s.Device, s.Backend = a, BackendMemfd
	log.Info("device pool: memfd arena", "pages", o.DevicePages, "bytes", a.Handle().Size, "requested", string(b))
	return nil
}

// GPUPresent reports whether BackendAuto finds a CUDA driver that
// initialises: the device tier is then GPU memory, not host memory.
func GPUPresent() bool {
	_, err := cudadrv.Load()
	return err == nil
}

func openCUDA(ordinal int) (*cudadrv.Context, error) {
	d, err := cudadrv.Load()
	if err != nil {
		return nil, err
	}
	return d.Open(ordinal)
}

// Memory returns the memory pool of tier t (device or host), or nil.
func (s *Set) Memory(t tier.Tier) pool.Memory {
	switch t {
	case tier.Device:
		return s.Device
	case tier.Host:
		return s.Host
	}
	return nil
}

// Store returns the store of tier t (disk or remote), or nil.
func (s *Set) Store(t tier.Tier) pool.Store {
	switch t {
	case tier.Disk:
		return s.Disk
	case tier.Remote:
		return s.Remote
	}
	return nil
}

// Close closes every pool, colder first, then the CUDA context.
func (s *Set) Close() error {
	var errs []error
	for _, p := range []pool.Pool{s.Remote, s.Disk, s.Host, s.Device} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	if s.CUDA != nil {
		errs = append(errs, s.CUDA.Close())
		s.CUDA = nil
	}
	return errors.Join(errs...)
}
