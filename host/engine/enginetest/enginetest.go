// Package enginetest runs a real kvpilot engine host for tests and
// benchmarks, in this process or in a child process, the way net/http/httptest
// runs a server: a cache index, the directive executor with an in-memory audit
// ring, memfd device and host arenas, a disk tier under a directory, the
// mover, the splicer (built at each registration, as the daemon does), and
// the Engine service on private Unix sockets. Nothing is mocked.
//
// A test binary that wants hosts in separate processes calls MaybeHostMain
// first thing in TestMain; Spawn then re-executes the test binary as a host.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/engine"
	"github.com/kvpilot/kvpilot/host/engine/grpcserver"
	"github.com/kvpilot/kvpilot/host/executor"
	"github.com/kvpilot/kvpilot/host/ingress"
	"github.com/kvpilot/kvpilot/host/internal/guarded"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/tiers"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/host/uds"
	"github.com/kvpilot/kvpilot/sdk/directive"
)

// Options shape a test host. Zero sizes take small defaults.
type Options struct {
	// Dir holds the sockets and the disk tier; a restarted host given the
	// same Dir finds its disk pages again.
	Dir         string `json:"dir"`
	PageSize    int    `json:"page_size"`
	DevicePages int    `json:"device_pages"`
	HostPages   int    `json:"host_pages"`
	// DeviceHeadroom is arena pages beyond the index's device capacity,
	// for slots allocated to running requests and not yet committed (the
	// index counts them as used, but a pool exactly the index's capacity
	// then depends on eviction keeping up); default a quarter of
	// DevicePages, negative for none.
	DeviceHeadroom int `json:"device_headroom"`
	// DiskPages 0 disables the disk tier.
	DiskPages int `json:"disk_pages"`
	// High and Low are every tier's watermarks (default 0.9 and 0.7).
	High float64 `json:"high"`
	Low  float64 `json:"low"`
	// PinFraction is every tier's pin budget (default 0.5).
	PinFraction float64 `json:"pin_fraction"`
	// WritePolicy is write-through (default), write-back or none.
	WritePolicy string `json:"write_policy"`
	// Configured, when set, opens the pools at start with this layout, as a
	// host with a configured model does.
	Configured *layout.Layout `json:"configured,omitempty"`
	// LoadBackDeadline for Match (default 2s).
	LoadBackDeadline time.Duration `json:"load_back_deadline"`
	// StepEvery is the mover's plan interval (default 20ms).
	StepEvery time.Duration `json:"step_every"`
	WorkerID  string        `json:"worker_id"`
	// SinkTokens protects the first positions from splices (default 0).
	SinkTokens int `json:"sink_tokens"`
	// AutoSplice turns session diff on (index.auto_splice).
	AutoSplice bool `json:"auto_splice"`
	// Verbose logs to stderr.
	Verbose bool `json:"verbose"`
}

func (o *Options) defaults() {
	if o.PageSize == 0 {
		o.PageSize = 16
	}
	if o.DevicePages == 0 {
		o.DevicePages = 64
	}
	switch {
	case o.DeviceHeadroom == 0:
		o.DeviceHeadroom = max(4, o.DevicePages/4)
	case o.DeviceHeadroom < 0:
		o.DeviceHeadroom = 0
	}
	if o.HostPages == 0 {
		o.HostPages = 256
	}
	if o.High == 0 {
		o.High, o.Low = 0.9, 0.7
	}
	if o.PinFraction == 0 {
		o.PinFraction = 0.5
	}
	if o.WritePolicy == "" {
		o.WritePolicy = "write-through"
	}
	if o.LoadBackDeadline == 0 {
		o.LoadBackDeadline = 2 * time.Second
	}
	if o.StepEvery == 0 {
		o.StepEvery = 20 * time.Millisecond
	}
	if o.WorkerID == "" {
		o.WorkerID = "7"
	}
}

// Host is a running test host.
type Host struct {
	Service *engine.Service
	// Server serves Service's protocol on Socket.
	Server *grpcserver.Server
	// Index is the host's cache index with its one lock.
	Index    *guarded.Index
	Executor *executor.Executor
	Audit    *executor.Ring
	// Socket and FDSocket are the engine socket and the side channel.
	Socket, FDSocket string

	opts       Options
	configured *tiers.Set // pools opened at start, closed by Close
	cancel     context.CancelFunc

	mu           sync.Mutex
	splicers     []*splice.Splicer // one per registration; their fills end at Close
	closeKernels []func() error
	wg           sync.WaitGroup
	closed       bool
}

// SocketPath is where a host with dir serves the engine socket.
func SocketPath(dir string) string { return filepath.Join(dir, "run", "engine.sock") }

// Start runs a host in this process.
func Start(o Options) (*Host, error) {
	o.defaults()
	if o.Dir == "" {
		return nil, errors.New("enginetest: Options.Dir is required")
	}
	log := hclog.NewNullLogger()
	if o.Verbose {
		log = hclog.New(&hclog.LoggerOptions{Name: "testhost", Level: hclog.Debug, Output: os.Stderr})
	}
	wp, err := cache.ParseWritePolicy(o.WritePolicy)
	if err != nil {
		return nil, err
	}
	h := &Host{Audit: executor.NewRing(1024), opts: o}
	var tcs [tier.Count]cache.TierConfig
	for t, pages := range map[tier.Tier]int{tier.Device: o.DevicePages, tier.Host: o.HostPages, tier.Disk: o.DiskPages} {
		tcs[t] = cache.TierConfig{Capacity: pages, High: o.High, Low: o.Low, PinFraction: o.PinFraction}
	}
	ix, err := cache.New(cache.Config{PageSize: o.PageSize, Tiers: tcs, DeviceWrite: wp, Clock: cache.NewMonotonicClock()})
	if err != nil {
		return nil, err
	}
	h.Index = guarded.New(ix)
	var pools *engine.Pools
	var poolsMu sync.Mutex
	open := func(ctx context.Context, l *layout.Layout, _ engine.Mode) (*engine.Pools, error) {
		set, err := tiers.Open(ctx, tiers.Options{
			Layout: l, DevicePages: o.DevicePages + o.DeviceHeadroom, DeviceBackend: tiers.BackendMemfd, HostPages: o.HostPages,
			DiskDir: filepath.Join(o.Dir, "disk"), DiskPages: o.DiskPages, DiskFsync: disk.FsyncBatch, Logger: log.Named("pools"),
		})
		if err != nil {
			return nil, err
		}
		m, err := mover.New(mover.Options{Index: h.Index, Pools: set, Logger: log.Named("mover")})
		if err != nil {
			_ = set.Close()
			return nil, err
		}
		if o.DiskPages > 0 {
			if _, err := m.Restore(ctx, tier.Disk); err != nil {
				_ = set.Close()
				return nil, err
			}
		}
		p := &engine.Pools{Layout: l.Clone(), Set: set, Mover: m, Close: set.Close}
		poolsMu.Lock()
		pools = p
		poolsMu.Unlock()
		return p, nil
	}
	h.Executor, err = executor.New(executor.Config{
		Index: h.Index, WorkerID: "7", Audit: h.Audit,
		Limits: directive.Limits{SinkTokens: int64(o.SinkTokens)},
		Attachments: executor.Attachments{Free: func(freed []cache.Freed) {
			poolsMu.Lock()
			p := pools
			poolsMu.Unlock()
			if p != nil {
				_ = p.Mover.Release(context.Background(), freed)
			}
		}},
	})
	if err != nil {
		return nil, err
	}
	free := func(freed []cache.Freed) {
		poolsMu.Lock()
		p := pools
		poolsMu.Unlock()
		if p != nil {
			_ = p.Mover.Release(context.Background(), freed)
		}
	}
	in, err := ingress.New(ingress.Config{Executor: h.Executor, Audit: h.Audit})
	if err != nil {
		return nil, err
	}
	cfg := engine.Config{Index: h.Index, Ingress: in,
		LoadBackDeadline: o.LoadBackDeadline, Log: log.Named("engine"), AutoSplice: o.AutoSplice,
		// The splicer of each registered layout, as the daemon builds it.
		OnRegister: func(reg engine.Registration, p *engine.Pools) {
			dev, closeKernels, err := splice.DeviceForPools(p.Set, reg.RopeConfig)
			if err != nil {
				log.Warn("no splice device for this layout", "error", err)
				dev = nil
			}
			sp, err := splice.New(splice.Config{Index: h.Index, Device: dev, Sessions: h.Service.SpliceSessions(),
				Salt: h.Index.Salt, SinkTokens: o.SinkTokens, Fill: h.Service.SpliceFill, Free: free})
			if err == nil {
				err = h.Executor.Attach(executor.Attachments{Free: free, Splicer: sp})
			}
			if err != nil {
				log.Error("splicer not attached", "error", err)
				return
			}
			h.Service.SetSplicer(sp)
			h.mu.Lock()
			h.splicers = append(h.splicers, sp)
			h.closeKernels = append(h.closeKernels, closeKernels)
			h.mu.Unlock()
		},
	}
	if o.Configured != nil {
		p, err := open(context.Background(), o.Configured, engine.ModeArena)
		if err != nil {
			return nil, err
		}
		p.Close = nil // the host's, not the service's
		cfg.Pools, h.configured = p, p.Set
	} else {
		cfg.OpenPools = open
	}
	h.Socket = SocketPath(o.Dir)
	h.FDSocket = filepath.Join(o.Dir, "run", "engine-fd.sock")
	h.Service, err = engine.New(cfg)
	if err != nil {
		return nil, err
	}
	h.Server, err = grpcserver.New(grpcserver.Config{Engine: h.Service, FDSocket: h.FDSocket, WorkerID: o.WorkerID, Log: log.Named("engine")})
	if err != nil {
		return nil, err
	}
	ln, err := uds.Listen(uds.Options{Path: h.Socket, Log: log})
	if err != nil {
		return nil, err
	}
	fdln, err := uds.Listen(uds.Options{Path: h.FDSocket, Log: log})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Add(3)
	go func() { defer h.wg.Done(); _ = h.Server.Serve(ln) }()
	go func() { defer h.wg.Done(); _ = h.Server.ServeFDs(fdln) }()
	go func() { defer h.wg.Done(); h.Service.Run(ctx, o.StepEvery) }()
	if o.Configured != nil {
		// The configured pools are the host's: step them here, as the
		// daemon's step loop does.
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			t := time.NewTicker(o.StepEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					cfg.Pools.Mover.Step(ctx)
				}
			}
		}()
	}
	return h, nil
}

// Close stops the host and closes its pools.
func (h *Host) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	h.Server.Stop(2 * time.Second)
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	for _, sp := range h.splicers {
		sp.Wait()
	}
	for _, c := range h.closeKernels {
		_ = c()
	}
	h.mu.Unlock()
	err := h.Service.Close()
	if h.configured != nil {
		err = errors.Join(err, h.configured.Close())
	}
	return err
}

// Page returns what the index knows of a tenant's page.
func (h *Host) Page(tenant string, seq uint64) (p cache.PageInfo, ok bool) {
	h.Index.Do(func(ix *cache.Index) { p, ok = ix.Lookup(tenant, seq) })
	return p, ok
}

// IndexStats is the index's snapshot.
func (h *Host) IndexStats() (st cache.Stats) {
	h.Index.Do(func(ix *cache.Index) { st = ix.Stats() })
	return st
}

// Check runs the index's invariant check.
func (h *Host) Check() (err error) {
	h.Index.Do(func(ix *cache.Index) { err = ix.Check() })
	if err != nil {
		return fmt.Errorf("index invariants: %w", err)
	}
	return nil
}
