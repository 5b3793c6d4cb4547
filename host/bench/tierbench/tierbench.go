// Package tierbench measures the throughput of each tier pair the mover
// uses (device<->host, host<->disk, host<->remote) for `kvpilot bench
// tiers`, against raw baselines in the same run: the best memory copy
// (baseline.go), a plain file write and read, and each remote backend's
// bytes put and got raw through the same server and client (remotearms.go;
// S3, raw alone, as a candidate: s3arms.go).
package tierbench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/pool/remote"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Targets: memory and disk pairs reach Target of their baseline; each
// remote backend reaches RemoteTarget of its raw baseline; the fastest
// remote backend moves FastestRemoteGBps both ways on loopback.
const (
	Target            = 0.9
	RemoteTarget      = 0.9
	FastestRemoteGBps = 2.0
)

// Options size a run.
type Options struct {
	Pages       int // moved per arm per round (default 128)
	RemotePages int // moved per remote arm (default 16): a slower store
	Iters       int // measured rounds; medians are reported (default 5)
	// Dir holds the page files and NATS data (default a temp dir, removed after).
	Dir string
	// Layout of the pages (default a Llama-3-8B-like page of 16 tokens, 2 MiB).
	Layout   *layout.Layout
	NoRemote bool
	// Redis and S3 are the servers of the redis arms and the s3 candidate
	// arms: an address, "auto" (start redis-server or SeaweedFS's weed
	// when installed) or "" or "off" (skip them).
	Redis, S3 string
	// Cores the memory arms also run on, sharing the pages (default every
	// CPU; 1 measures one core only).
	Cores int
}

// Arm is one measured transfer.
type Arm struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gb_per_s"`
}

// Result is the scenario's output.
type Result struct {
	Scenario string             `json:"scenario"`
	Params   map[string]any     `json:"params"`
	Arms     map[string]Arm     `json:"arms"`
	Ratio    map[string]float64 `json:"ratio"`
	Target   float64            `json:"target"`
	Pass     bool               `json:"pass"` // memory and disk pairs
	Targets  Targets            `json:"targets"`
	// Baselines are the memory baseline on one core and on Cores cores.
	Baselines []Baseline `json:"memory_baselines"`
	// Candidates are the shared-tier stores measured raw in this run, for
	// choosing among them by the figures.
	Candidates []Candidate `json:"candidates,omitempty"`
}

// Candidate is one store's raw put and get of the run's pages.
type Candidate struct {
	Store   string  `json:"store"`
	PutGBps float64 `json:"put_gb_per_s"`
	GetGBps float64 `json:"get_gb_per_s"`
	// Backend: the remote tier has a backend on this store.
	Backend bool `json:"backend"`
}

// Targets are every target of the run and whether all were met.
type Targets struct {
	MemoryDiskRatioMin   float64 `json:"memory_disk_ratio_min"`
	RemoteRatioMin       float64 `json:"remote_vs_raw_ratio_min"`
	FastestRemoteGBpsMin float64 `json:"fastest_remote_gb_per_s_min"`
	// FastestRemote is the backend with the best slower direction.
	FastestRemote string `json:"fastest_remote,omitempty"`
	Met           bool   `json:"met"`
}

func (o *Options) defaults() {
	o.Pages = cmp.Or(o.Pages, 128)
	o.RemotePages = cmp.Or(o.RemotePages, 16)
	o.Iters = cmp.Or(o.Iters, 5)
	o.Cores = cmp.Or(o.Cores, runtime.NumCPU())
	o.Layout = cmp.Or(o.Layout, DefaultLayout())
}

// DefaultLayout is the page the benchmark moves unless told otherwise.
func DefaultLayout() *layout.Layout {
	l := layout.MHA("bench-llama-3-8b", 16, layout.BF16, 32, 8, 128, 128, layout.HalfSplit)
	return &l
}

// arm is one measured transfer of pages pages.
type arm struct {
	name  string
	pages int
	fn    func(n int) error
}

// Run measures every arm.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "kvpilot-bench-tiers-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	f, err := NewFixture(o.Dir, o.Layout, o.Pages, !o.NoRemote)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !o.NoRemote {
		if err := f.openRedis(o.Dir, o.Redis); err != nil {
			return nil, err
		}
		if err := f.openS3(o.Dir, o.S3); err != nil {
			return nil, err
		}
	}
	coreCounts, methods := []int{1}, copyMethods()
	if o.Cores > 1 {
		coreCounts = append(coreCounts, o.Cores)
	}
	var arms []arm
	for _, c := range coreCounts {
		for _, m := range methods {
			arms = append(arms, arm{armName("memcpy_"+m.name, c), o.Pages, f.copyWith(m, c)})
		}
		arms = append(arms, arm{armName("device_to_host", c), o.Pages, f.deviceCopyOn(c, false)},
			arm{armName("host_to_device", c), o.Pages, f.deviceCopyOn(c, true)})
	}
	arms = append(arms, arm{"file_write", o.Pages, f.fileArm(true)}, arm{"host_to_disk", o.Pages, f.storeArm(f.disk, true)},
		arm{"file_read", o.Pages, f.fileArm(false)}, arm{"disk_to_host", o.Pages, f.storeArm(f.disk, false)})
	for _, s := range f.stores {
		arms = append(arms, arm{s.rawPut, o.RemotePages, s.raw(true)})
		if s.backend != nil {
			arms = append(arms, arm{s.put, o.RemotePages, f.storeArm(s.backend, true)})
		}
		arms = append(arms, arm{s.rawGet, o.RemotePages, s.raw(false)})
		if s.backend != nil {
			arms = append(arms, arm{s.get, o.RemotePages, f.storeArm(s.backend, false)})
		}
	}
	secs, err := measure(ctx, arms, o.Iters)
	if err != nil {
		return nil, err
	}
	pb := int64(o.Layout.PageBytes())
	res := &Result{Scenario: "tiers", Arms: map[string]Arm{}, Ratio: map[string]float64{}, Target: Target, Pass: true,
		Params: map[string]any{"pages": o.Pages, "remote_pages": o.RemotePages, "page_bytes": pb, "iters": o.Iters,
			"layout": o.Layout.String(), "fsync": "one fdatasync per batch, both arms", "cores": o.Cores,
			"memory_baseline": "per round, the fastest of Go copy, REP MOVSB and non-temporal AVX2 stores, on as many cores as the pair"}}
	record := func(name string, pages int, s []float64) {
		sec, bytes := median(s), int64(pages)*pb
		res.Arms[name] = Arm{Bytes: bytes, Seconds: sec, GBps: float64(bytes) / sec / 1e9}
	}
	for _, a := range arms {
		record(a.name, a.pages, secs[a.name])
	}
	// Each ratio is the median of its per-round ratios: a pair and its
	// baseline are measured seconds apart, so load from other processes
	// shifts both alike. Same bytes: the time ratio is the throughput ratio.
	ratio := func(arm, base string) float64 {
		rs := make([]float64, o.Iters)
		for i := range rs {
			rs[i] = secs[base][i] / secs[arm][i]
		}
		res.Ratio[arm] = median(rs)
		return res.Ratio[arm]
	}
	// The memory baseline of each core count is each round's fastest
	// method, recorded as the arm "memcpy" ("memcpy_x2").
	for _, c := range coreCounts {
		var names []string
		for _, m := range methods {
			names = append(names, armName("memcpy_"+m.name, c))
		}
		best, top := bestOf(secs, names)
		base := armName("memcpy", c)
		secs[base] = best
		record(base, o.Pages, best)
		res.Baselines = append(res.Baselines, Baseline{Cores: c, Method: methods[top].name, GBps: res.Arms[base].GBps})
		dh, hd := ratio(armName("device_to_host", c), base), ratio(armName("host_to_device", c), base)
		res.Pass = res.Pass && dh >= Target && hd >= Target
	}
	hd, dh := ratio("host_to_disk", "file_write"), ratio("disk_to_host", "file_read")
	res.Pass = res.Pass && hd >= Target && dh >= Target
	res.Targets = Targets{MemoryDiskRatioMin: Target, RemoteRatioMin: RemoteTarget, FastestRemoteGBpsMin: FastestRemoteGBps, Met: res.Pass}
	if o.NoRemote {
		return res, nil
	}
	fastest := 0.0
	for _, s := range f.stores {
		res.Candidates = append(res.Candidates, Candidate{Store: s.name, PutGBps: res.Arms[s.rawPut].GBps,
			GetGBps: res.Arms[s.rawGet].GBps, Backend: s.backend != nil})
		if s.backend == nil {
			continue
		}
		put, get := ratio(s.put, s.rawPut), ratio(s.get, s.rawGet)
		res.Targets.Met = res.Targets.Met && put >= RemoteTarget && get >= RemoteTarget
		if slow := min(res.Arms[s.put].GBps, res.Arms[s.get].GBps); slow > fastest {
			fastest, res.Targets.FastestRemote = slow, s.name
		}
	}
	res.Targets.Met = res.Targets.Met && fastest >= FastestRemoteGBps
	return res, nil
}

// measure runs the arms interleaved, round by round, after one unmeasured
// pass (it warms caches and stores what the read arms read), and returns
// each arm's seconds per round.
func measure(ctx context.Context, arms []arm, iters int) (map[string][]float64, error) {
	secs := map[string][]float64{}
	for round := -1; round < iters; round++ {
		for _, a := range arms {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			start := time.Now()
			if err := a.fn(a.pages); err != nil {
				return nil, fmt.Errorf("arm %s: %w", a.name, err)
			}
			if round >= 0 {
				secs[a.name] = append(secs[a.name], time.Since(start).Seconds())
			}
		}
	}
	return secs, nil
}

func median(v []float64) float64 {
	return slices.Sorted(slices.Values(v))[len(v)/2]
}

// Fixture holds the pools and baselines the arms use; the Go benchmarks
// share it.
type Fixture struct {
	lay            *layout.Layout
	pages          int
	dev, host, raw *memfd.Arena // raw: the memory baseline's destination
	devSlots       []pool.Slot
	hostSlots      []pool.Slot
	disk           *disk.Store
	file           *os.File
	remote         *remote.Store // JetStream's backend, when the fixture has one
	stores         []remoteStore // the remote stores opened, in order
	closers        []func()      // what Close releases, the last opened first
}

// NewFixture opens pools of pages pages under dir, filled with data.
func NewFixture(dir string, l *layout.Layout, pages int, withRemote bool) (f *Fixture, err error) {
	f = &Fixture{lay: l, pages: pages}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	arena := func(t tier.Tier, a layout.Arrangement, name string) (*memfd.Arena, []pool.Slot, error) {
		m, err := memfd.New(memfd.Options{Tier: t, Layout: l, Pages: pages, Arrangement: a, Name: name})
		if err != nil {
			return nil, nil, err
		}
		f.onClose(func() { m.Close() })
		slots, err := m.Alloc(nil, pages)
		// Every arena is written once so no arm pays first-touch page faults.
		mem := m.Bytes()
		for i := range mem {
			mem[i] = byte(i*7 + i>>12)
		}
		return m, slots, err
	}
	if f.dev, f.devSlots, err = arena(tier.Device, layout.LayerMajor, ""); err != nil {
		return nil, err
	}
	if f.host, f.hostSlots, err = arena(tier.Host, layout.PageMajor, ""); err != nil {
		return nil, err
	}
	if f.raw, _, err = arena(tier.Host, layout.PageMajor, "kvpilot-bench-raw"); err != nil {
		return nil, err
	}
	// Twice the pages: Put writes a fresh slot before retiring the old copy.
	if f.disk, err = disk.Open(disk.Options{Dir: filepath.Join(dir, "disk"), Layout: l, Pages: 2 * pages, Fsync: disk.FsyncBatch}); err != nil {
		return nil, err
	}
	f.onClose(func() { f.disk.Close() })
	if f.file, err = os.OpenFile(filepath.Join(dir, "baseline.raw"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
		return nil, err
	}
	f.onClose(func() { f.file.Close() })
	if withRemote {
		err = f.openJetStream(filepath.Join(dir, "nats"))
	}
	return f, err
}

// onClose has Close run fn.
func (f *Fixture) onClose(fn func()) { f.closers = append(f.closers, fn) }

// Close releases everything.
func (f *Fixture) Close() error {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
	return nil
}

// hostView is host page i: the fixture holds f.pages, page i is i modulo
// those.
func (f *Fixture) hostView(i int) []byte {
	v, _ := f.host.PageView(f.hostSlots[i%f.pages])
	return v
}

// fileArm is the disk baseline: n pages written sequentially to a plain
// file, then one fdatasync; or read back.
func (f *Fixture) fileArm(write bool) func(n int) error {
	pb := int64(f.lay.PageBytes())
	pages := onCores(1, func(i int) error {
		if write {
			_, err := f.file.WriteAt(f.hostView(i), int64(i)*pb)
			return err
		}
		_, err := f.file.ReadAt(f.hostView(i), int64(i%f.pages)*pb)
		return err
	})
	return func(n int) error {
		if err := pages(n); err != nil || !write {
			return err
		}
		return unix.Fdatasync(int(f.file.Fd()))
	}
}

// storeArm puts n host pages in s (the disk tier, a remote backend), then
// syncs it once; or gets them back (verified).
func (f *Fixture) storeArm(s pool.Store, put bool) func(n int) error {
	ctx := context.Background()
	pages := onCores(1, func(i int) error {
		k := pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}
		if put {
			return s.Put(ctx, pool.Entry{Key: k, Local: uint64(i)}, f.hostView(i))
		}
		return s.Get(ctx, k, f.hostView(i))
	})
	return func(n int) error {
		if err := pages(n); err != nil || !put {
			return err
		}
		return s.Sync()
	}
}
