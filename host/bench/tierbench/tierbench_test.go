package tierbench

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
)

func small() *layout.Layout {
	l := layout.MHA("bench-small", 16, layout.BF16, 4, 2, 64, 64, layout.HalfSplit)
	return &l
}

// TestRunSmall runs the scenario on a small layout: every arm present,
// JSON shaped as the CLI contract says.
func TestRunSmall(t *testing.T) {
	r, err := Run(context.Background(), Options{Pages: 8, RemotePages: 2, Iters: 1, Dir: t.TempDir(), Layout: small(), Redis: "auto", Cores: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"memcpy", "device_to_host", "host_to_device", "file_write", "host_to_disk", "file_read", "disk_to_host", "host_to_remote", "remote_to_host"} {
		if r.Arms[a].GBps <= 0 {
			t.Fatalf("arm %s: %+v", a, r.Arms[a])
		}
	}
	if _, err := exec.LookPath("redis-server"); err == nil {
		for _, a := range []string{"redis_raw_set", "host_to_redis", "redis_raw_get", "redis_to_host"} {
			if r.Arms[a].GBps <= 0 {
				t.Fatalf("arm %s: %+v", a, r.Arms[a])
			}
		}
	}
	if r.Ratio["host_to_remote"] <= 0 || r.Targets.RemoteRatioMin != RemoteTarget {
		t.Fatalf("remote ratios and targets: %v %+v", r.Ratio, r.Targets)
	}
	// The memory baseline: every copy method, on one core and on two, and
	// the memory pairs against the fastest on as many cores.
	if len(r.Baselines) != 2 || r.Baselines[0].Cores != 1 || r.Baselines[1].Cores != 2 {
		t.Fatalf("memory baselines: %+v", r.Baselines)
	}
	for _, a := range []string{"memcpy_go", "memcpy_go_x2", "memcpy_x2", "device_to_host_x2", "host_to_device_x2"} {
		if r.Arms[a].GBps <= 0 {
			t.Fatalf("arm %s: %+v", a, r.Arms[a])
		}
	}
	for _, b := range r.Baselines {
		if fastest := r.Arms[armName("memcpy", b.Cores)].GBps; fastest < r.Arms[armName("memcpy_go", b.Cores)].GBps*0.999 {
			t.Fatalf("the baseline on %d cores (%.2f GB/s) is slower than Go's copy", b.Cores, fastest)
		}
	}
	if r.Ratio["device_to_host_x2"] <= 0 {
		t.Fatalf("ratios: %v", r.Ratio)
	}
	b, _ := json.Marshal(r)
	var back map[string]any
	json.Unmarshal(b, &back)
	if back["scenario"] != "tiers" || back["arms"] == nil || back["ratio"] == nil {
		t.Fatalf("json: %s", b)
	}
}

// TestS3CandidateArms measures the S3 candidate against a SeaweedFS server
// the run starts, where weed is installed: both arms move pages, and the
// candidates list every store measured, s3 without a backend.
func TestS3CandidateArms(t *testing.T) {
	if _, err := exec.LookPath("weed"); err != nil {
		t.Skip("weed (SeaweedFS) is not on PATH; make bench-stores builds it into .tools/")
	}
	r, err := Run(context.Background(), Options{Pages: 4, RemotePages: 2, Iters: 1, Dir: t.TempDir(), Layout: small(), Redis: "off", S3: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"s3_raw_put", "s3_raw_get"} {
		if r.Arms[a].GBps <= 0 {
			t.Fatalf("arm %s: %+v", a, r.Arms[a])
		}
	}
	stores := map[string]bool{}
	for _, c := range r.Candidates {
		stores[c.Store] = c.Backend
	}
	if backend, ok := stores["s3"]; !ok || backend || !stores["jetstream"] {
		t.Fatalf("candidates: %+v", r.Candidates)
	}
}

func benchArm(b *testing.B, arm func(f *Fixture) func(int) error, remote bool) {
	benchArmAfter(b, nil, arm, remote)
}

// benchArmAfter runs prep once first: read arms need what a write arm stores.
func benchArmAfter(b *testing.B, prep, arm func(f *Fixture) func(int) error, remote bool) {
	const pages = 64
	f, err := NewFixture(b.TempDir(), DefaultLayout(), pages, remote)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if prep != nil {
		if err := prep(f)(pages); err != nil {
			b.Fatal(err)
		}
	}
	fn := arm(f)
	if err := fn(pages); err != nil { // warm-up
		b.Fatal(err)
	}
	b.SetBytes(int64(f.lay.PageBytes()))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// One page per op; batches of `pages` keep the fsync of the write
		// arms amortized as in the mover.
		if (i+1)%pages == 0 {
			if err := fn(pages); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// The Go benchmarks measure the same arms; compare each pair with its
// baseline in one run, e.g.
//
//	go test -run X -bench 'Tier' ./host/bench/tierbench
func BenchmarkTierMemcpy(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.copyWith(copyMethods()[0], 1) }, false)
}
func BenchmarkTierDeviceToHost(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.deviceCopyOn(1, false) }, false)
}
func BenchmarkTierHostToDevice(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.deviceCopyOn(1, true) }, false)
}
func BenchmarkTierFileWrite(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.fileArm(true) }, false)
}
func BenchmarkTierHostToDisk(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.storeArm(f.disk, true) }, false)
}
func BenchmarkTierFileRead(b *testing.B) {
	benchArmAfter(b, func(f *Fixture) func(int) error { return f.fileArm(true) },
		func(f *Fixture) func(int) error { return f.fileArm(false) }, false)
}
func BenchmarkTierDiskToHost(b *testing.B) {
	benchArmAfter(b, func(f *Fixture) func(int) error { return f.storeArm(f.disk, true) },
		func(f *Fixture) func(int) error { return f.storeArm(f.disk, false) }, false)
}
func BenchmarkTierHostToRemote(b *testing.B) {
	benchArm(b, func(f *Fixture) func(int) error { return f.storeArm(f.remote, true) }, true)
}
func BenchmarkTierRemoteToHost(b *testing.B) {
	benchArmAfter(b, func(f *Fixture) func(int) error { return f.storeArm(f.remote, true) },
		func(f *Fixture) func(int) error { return f.storeArm(f.remote, false) }, true)
}
