// Package tierbench measures the throughput of each tier pair the mover
// uses (device<->host, host<->disk, host<->remote) against raw baselines in
// the same run: the best memory copy this machine makes for memory, per
// core and across cores (baseline.go), a plain sequential file write and read
// for disk, and for each remote backend the same bytes put and got raw
// through the same server and client (JetStream objects on the embedded
// server; Redis SET and GET, on a redis-server it starts when one is
// installed). S3-compatible storage is measured raw beside them as a
// candidate (s3arms.go). `kvpilot bench tiers` prints it.
package tierbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/natsembed"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/memfd"
	"github.com/kvpilot/kvpilot/host/pool/remote"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/minio/minio-go/v7"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
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
	// Pages moved per arm per iteration (default 128).
	Pages int
	// RemotePages moved per remote arm (default 16): the object store is
	// much slower and has no target.
	RemotePages int
	// Iters is measured rounds; medians are reported (default 5).
	Iters int
	// Dir holds the page files and NATS data (default a temp dir, removed after).
	Dir string
	// Layout of the pages (default a Llama-3-8B-like page of 16 tokens, 2 MiB).
	Layout *layout.Layout
	// NoRemote skips the remote arms.
	NoRemote bool
	// Redis is the address of a Redis or Valkey server for the redis arms;
	// "auto" starts one when redis-server is installed; "" or "off" skips
	// them.
	Redis string
	// S3 is the endpoint of an S3-compatible store for the s3 candidate
	// arms; "auto" starts SeaweedFS when weed is installed; "" or "off"
	// skips them.
	S3 string
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

// DefaultLayout is the page the benchmark moves unless told otherwise.
func DefaultLayout() *layout.Layout {
	l := layout.MHA("bench-llama-3-8b", 16, layout.BF16, 32, 8, 128, 128, layout.HalfSplit)
	return &l
}

// Run measures every arm.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Pages <= 0 {
		o.Pages = 128
	}
	if o.RemotePages <= 0 {
		o.RemotePages = 16
	}
	if o.Iters <= 0 {
		o.Iters = 5
	}
	if o.Layout == nil {
		o.Layout = DefaultLayout()
	}
	if o.Cores <= 0 {
		o.Cores = runtime.NumCPU()
	}
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
	pb := int64(o.Layout.PageBytes())
	res := &Result{Scenario: "tiers", Arms: map[string]Arm{}, Ratio: map[string]float64{}, Target: Target,
		Params: map[string]any{"pages": o.Pages, "remote_pages": o.RemotePages, "page_bytes": pb, "iters": o.Iters,
			"layout": o.Layout.String(), "fsync": "one fdatasync per batch, both arms", "cores": o.Cores,
			"memory_baseline": "per round, the fastest of Go copy, REP MOVSB and non-temporal AVX2 stores, on as many cores as the pair"}}
	type arm = struct {
		name  string
		pages int
		fn    func(n int) error
	}
	var arms []arm
	coreCounts := []int{1}
	if o.Cores > 1 {
		coreCounts = append(coreCounts, o.Cores)
	}
	methods := copyMethods()
	for _, c := range coreCounts {
		for _, m := range methods {
			arms = append(arms, arm{armName("memcpy_"+m.name, c), o.Pages, f.copyWith(m, c)})
		}
		arms = append(arms,
			arm{armName("device_to_host", c), o.Pages, f.deviceToHostOn(c)},
			arm{armName("host_to_device", c), o.Pages, f.hostToDeviceOn(c)})
	}
	arms = append(arms,
		arm{"file_write", o.Pages, f.FileWrite},
		arm{"host_to_disk", o.Pages, f.HostToDisk},
		arm{"file_read", o.Pages, f.FileRead},
		arm{"disk_to_host", o.Pages, f.DiskToHost})
	if !o.NoRemote {
		arms = append(arms,
			arm{"jetstream_raw_put", o.RemotePages, f.rawJetStream(true)},
			arm{"host_to_remote", o.RemotePages, f.HostToRemote},
			arm{"jetstream_raw_get", o.RemotePages, f.rawJetStream(false)},
			arm{"remote_to_host", o.RemotePages, f.RemoteToHost})
	}
	if f.redis != nil {
		arms = append(arms,
			arm{"redis_raw_set", o.RemotePages, f.rawRedis(true)},
			arm{"host_to_redis", o.RemotePages, f.storeArm(f.redis, true)},
			arm{"redis_raw_get", o.RemotePages, f.rawRedis(false)},
			arm{"redis_to_host", o.RemotePages, f.storeArm(f.redis, false)})
	}
	if f.s3 != nil {
		arms = append(arms,
			arm{"s3_raw_put", o.RemotePages, f.rawS3(true)},
			arm{"s3_raw_get", o.RemotePages, f.rawS3(false)})
	}
	// Arms run interleaved, round by round, and each ratio is the median of
	// its per-round ratios: a pair and its baseline are measured seconds
	// apart, so load from other processes shifts both alike.
	for _, a := range arms { // one unmeasured pass: warms caches, creates what read arms read
		if err := a.fn(a.pages); err != nil {
			return nil, fmt.Errorf("arm %s: %w", a.name, err)
		}
	}
	secs := map[string][]float64{}
	for range o.Iters {
		for _, a := range arms {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			start := time.Now()
			if err := a.fn(a.pages); err != nil {
				return nil, fmt.Errorf("arm %s: %w", a.name, err)
			}
			secs[a.name] = append(secs[a.name], time.Since(start).Seconds())
		}
	}
	for _, a := range arms {
		sec := median(secs[a.name])
		bytes := int64(a.pages) * pb
		res.Arms[a.name] = Arm{Bytes: bytes, Seconds: sec, GBps: float64(bytes) / sec / 1e9}
	}
	ratio := func(arm, base string) float64 {
		rs := make([]float64, o.Iters)
		for i := range rs {
			rs[i] = secs[base][i] / secs[arm][i] // same bytes: time ratio is throughput ratio
		}
		return median(rs)
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
		sec, bytes := median(best), int64(o.Pages)*pb
		res.Arms[base] = Arm{Bytes: bytes, Seconds: sec, GBps: float64(bytes) / sec / 1e9}
		res.Baselines = append(res.Baselines, Baseline{Cores: c, Method: methods[top].name, GBps: res.Arms[base].GBps})
		for _, pair := range []string{"device_to_host", "host_to_device"} {
			res.Ratio[armName(pair, c)] = ratio(armName(pair, c), base)
		}
	}
	res.Ratio["host_to_disk"] = ratio("host_to_disk", "file_write")
	res.Ratio["disk_to_host"] = ratio("disk_to_host", "file_read")
	res.Pass = true
	for _, r := range res.Ratio {
		if r < Target {
			res.Pass = false
		}
	}
	res.Targets = Targets{MemoryDiskRatioMin: Target, RemoteRatioMin: RemoteTarget, FastestRemoteGBpsMin: FastestRemoteGBps, Met: res.Pass}
	if o.NoRemote {
		return res, nil
	}
	fastest := 0.0
	for _, b := range []struct{ name, put, putRaw, get, getRaw string }{
		{"jetstream", "host_to_remote", "jetstream_raw_put", "remote_to_host", "jetstream_raw_get"},
		{"redis", "host_to_redis", "redis_raw_set", "redis_to_host", "redis_raw_get"},
	} {
		if _, ok := res.Arms[b.put]; !ok {
			continue
		}
		res.Ratio[b.put] = ratio(b.put, b.putRaw)
		res.Ratio[b.get] = ratio(b.get, b.getRaw)
		if res.Ratio[b.put] < RemoteTarget || res.Ratio[b.get] < RemoteTarget {
			res.Targets.Met = false
		}
		if slow := min(res.Arms[b.put].GBps, res.Arms[b.get].GBps); slow > fastest {
			fastest, res.Targets.FastestRemote = slow, b.name
		}
	}
	if fastest < FastestRemoteGBps {
		res.Targets.Met = false
	}
	for _, c := range []struct {
		store, put, get string
		backend         bool
	}{
		{"jetstream", "jetstream_raw_put", "jetstream_raw_get", true},
		{"redis", "redis_raw_set", "redis_raw_get", true},
		{"s3", "s3_raw_put", "s3_raw_get", false},
	} {
		if put, ok := res.Arms[c.put]; ok {
			res.Candidates = append(res.Candidates, Candidate{Store: c.store, PutGBps: put.GBps, GetGBps: res.Arms[c.get].GBps, Backend: c.backend})
		}
	}
	return res, nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// Table prints the result for people.
func (r *Result) Table(w io.Writer) {
	fmt.Fprintf(w, "tiers: %v pages of %v bytes (%v)\n\n", r.Params["pages"], r.Params["page_bytes"], r.Params["layout"])
	fmt.Fprintf(w, "%-20s %12s %10s %8s\n", "arm", "bytes", "GB/s", "ratio")
	var names []string
	for _, b := range r.Baselines {
		for _, a := range []string{"memcpy_go", "memcpy_erms", "memcpy_nt", "memcpy", "device_to_host", "host_to_device"} {
			names = append(names, armName(a, b.Cores))
		}
	}
	names = append(names, "file_write", "host_to_disk", "file_read", "disk_to_host",
		"jetstream_raw_put", "host_to_remote", "jetstream_raw_get", "remote_to_host",
		"redis_raw_set", "host_to_redis", "redis_raw_get", "redis_to_host", "s3_raw_put", "s3_raw_get")
	for _, name := range names {
		a, ok := r.Arms[name]
		if !ok {
			continue
		}
		ratio := ""
		if v, ok := r.Ratio[name]; ok {
			ratio = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "%-20s %12d %10.2f %8s\n", name, a.Bytes, a.GBps, ratio)
	}
	for _, b := range r.Baselines {
		fmt.Fprintf(w, "memory baseline on %d core(s): %.2f GB/s, fastest by %s in most rounds\n", b.Cores, b.GBps, b.Method)
	}
	if len(r.Candidates) > 0 {
		fmt.Fprintf(w, "\nshared-tier stores, raw (GB/s): ")
		for i, c := range r.Candidates {
			if i > 0 {
				fmt.Fprint(w, "; ")
			}
			backend := ""
			if !c.Backend {
				backend = ", no backend"
			}
			fmt.Fprintf(w, "%s put %.2f get %.2f%s", c.Store, c.PutGBps, c.GetGBps, backend)
		}
		fmt.Fprintln(w)
	}
	t := r.Targets
	fmt.Fprintf(w, "\ntargets: ratio >= %.2f for memory and disk pairs (%v); remote backends >= %.2f of their raw baseline; the fastest (%s) >= %.1f GB/s both ways\n",
		t.MemoryDiskRatioMin, map[bool]string{true: "met", false: "missed"}[r.Pass], t.RemoteRatioMin, t.FastestRemote, t.FastestRemoteGBpsMin)
	fmt.Fprintf(w, "targets met: %v\n", t.Met)
}

// Fixture holds the pools and baselines the arms use; the Go benchmarks
// share it.
type Fixture struct {
	lay    *layout.Layout
	pages  int
	dev    *memfd.Arena
	host   *memfd.Arena
	raw    *memfd.Arena // memcpy baseline destination
	disk   *disk.Store
	file   *os.File
	nats   *natsembed.NATS
	remote *remote.Store
	rawObs jetstream.ObjectStore // the raw JetStream baseline's bucket handle

	redis     *remote.Store // the redis backend, when the run has one
	rc        *redis.Client // the raw Redis baseline's client
	redisProc *exec.Cmd     // a redis-server started for the run
	s3        *minio.Client // the s3 candidate arms' client
	s3Proc    *exec.Cmd     // a SeaweedFS server started for the run
	devSlots  []pool.Slot
	hostSlot  []pool.Slot
}

// NewFixture opens pools of pages pages under dir, filled with data.
func NewFixture(dir string, l *layout.Layout, pages int, withRemote bool) (f *Fixture, err error) {
	f = &Fixture{lay: l, pages: pages}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.dev, err = memfd.New(memfd.Options{Tier: tier.Device, Layout: l, Pages: pages, Arrangement: layout.LayerMajor}); err != nil {
		return nil, err
	}
	if f.host, err = memfd.New(memfd.Options{Tier: tier.Host, Layout: l, Pages: pages, Arrangement: layout.PageMajor}); err != nil {
		return nil, err
	}
	if f.raw, err = memfd.New(memfd.Options{Tier: tier.Host, Layout: l, Pages: pages, Arrangement: layout.PageMajor, Name: "kvpilot-bench-raw"}); err != nil {
		return nil, err
	}
	if f.devSlots, err = f.dev.Alloc(nil, pages); err != nil {
		return nil, err
	}
	if f.hostSlot, err = f.host.Alloc(nil, pages); err != nil {
		return nil, err
	}
	if _, err = f.raw.Alloc(nil, pages); err != nil {
		return nil, err
	}
	// Every arena is written once so no arm pays first-touch page faults.
	for _, a := range []*memfd.Arena{f.host, f.dev, f.raw} {
		mem := a.Bytes()
		for i := range mem {
			mem[i] = byte(i*7 + i>>12)
		}
	}
	// Twice the pages: Put writes a fresh slot before retiring the old copy.
	if f.disk, err = disk.Open(disk.Options{Dir: filepath.Join(dir, "disk"), Layout: l, Pages: 2 * pages, Fsync: disk.FsyncBatch}); err != nil {
		return nil, err
	}
	if f.file, err = os.OpenFile(filepath.Join(dir, "baseline.raw"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
		return nil, err
	}
	if withRemote {
		if f.nats, err = natsembed.Start(natsembed.Options{DataDir: filepath.Join(dir, "nats")}); err != nil {
			return nil, err
		}
		js, err := f.nats.JetStream()
		if err != nil {
			return nil, err
		}
		if f.remote, err = remote.Open(context.Background(), remote.Options{JS: js, Layout: l, Bucket: "kvpilot-bench"}); err != nil {
			return nil, err
		}
		if err = f.openRawJetStream(js); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// PageBytes is the size of one page.
func (f *Fixture) PageBytes() int { return f.lay.PageBytes() }

func (f *Fixture) hostView(i int) []byte {
	v, _ := f.host.PageView(f.hostSlot[i%f.pages])
	return v
}

// Memcpy is the memory baseline: n pages copied between two mappings.
func (f *Fixture) Memcpy(n int) error {
	pb := f.lay.PageBytes()
	src, dst := f.host.Bytes(), f.raw.Bytes()
	for i := range n {
		off := (i % f.pages) * pb
		copy(dst[off:off+pb], src[off:off+pb])
	}
	return nil
}

// DeviceToHost reads n device pages (layer-major gather) into host pages.
func (f *Fixture) DeviceToHost(n int) error {
	for i := range n {
		if err := f.dev.ReadPage(f.devSlots[i%f.pages], f.hostView(i)); err != nil {
			return err
		}
	}
	return nil
}

// HostToDevice writes n host pages into device slots (layer-major scatter).
func (f *Fixture) HostToDevice(n int) error {
	for i := range n {
		if err := f.dev.WritePage(f.devSlots[i%f.pages], f.hostView(i)); err != nil {
			return err
		}
	}
	return nil
}

// FileWrite is the disk write baseline: n pages written sequentially to a
// plain file, then one fdatasync.
func (f *Fixture) FileWrite(n int) error {
	pb := f.lay.PageBytes()
	for i := range n {
		if _, err := f.file.WriteAt(f.hostView(i), int64(i)*int64(pb)); err != nil {
			return err
		}
	}
	return unix.Fdatasync(int(f.file.Fd()))
}

// FileRead is the disk read baseline: n pages read sequentially.
func (f *Fixture) FileRead(n int) error {
	pb := f.lay.PageBytes()
	for i := range n {
		if _, err := f.file.ReadAt(f.hostView(i), int64(i%f.pages)*int64(pb)); err != nil {
			return err
		}
	}
	return nil
}

// HostToDisk stores n host pages in the disk tier, then one Sync.
func (f *Fixture) HostToDisk(n int) error {
	ctx := context.Background()
	for i := range n {
		e := pool.Entry{Key: pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}, Local: uint64(i)}
		if err := f.disk.Put(ctx, e, f.hostView(i)); err != nil {
			return err
		}
	}
	return f.disk.Sync()
}

// DiskToHost reads n pages (verified) from the disk tier into host pages.
func (f *Fixture) DiskToHost(n int) error {
	ctx := context.Background()
	for i := range n {
		if err := f.disk.Get(ctx, pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}, f.hostView(i)); err != nil {
			return err
		}
	}
	return nil
}

// HostToRemote stores n host pages in the object store.
func (f *Fixture) HostToRemote(n int) error {
	if f.remote == nil {
		return fmt.Errorf("no remote tier in this fixture")
	}
	ctx := context.Background()
	for i := range n {
		e := pool.Entry{Key: pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}, Local: uint64(i)}
		if err := f.remote.Put(ctx, e, f.hostView(i)); err != nil {
			return err
		}
	}
	return nil
}

// RemoteToHost reads n pages from the object store into host pages.
func (f *Fixture) RemoteToHost(n int) error {
	if f.remote == nil {
		return fmt.Errorf("no remote tier in this fixture")
	}
	ctx := context.Background()
	for i := range n {
		if err := f.remote.Get(ctx, pool.Key{Namespace: "bench", Seq: uint64(i % f.pages)}, f.hostView(i)); err != nil {
			return err
		}
	}
	return nil
}

// Close releases everything.
func (f *Fixture) Close() error {
	f.closeRedis()
	f.closeS3()
	for _, c := range []io.Closer{f.remote, f.disk, f.dev, f.host, f.raw, f.file} {
		if c != nil && !isNil(c) {
			c.Close()
		}
	}
	if f.nats != nil {
		f.nats.Close()
	}
	return nil
}

func isNil(c io.Closer) bool {
	switch v := c.(type) {
	case *remote.Store:
		return v == nil
	case *disk.Store:
		return v == nil
	case *memfd.Arena:
		return v == nil
	case *os.File:
		return v == nil
	}
	return false
}
