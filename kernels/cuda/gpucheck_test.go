package cuda

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUCheckSummarizes runs gpu-check.sh (what make gpu-check bundles)
// over stand-in test binaries that print what go test -v prints on a GPU
// machine: the summary counts passes, failures (with their messages) and
// skips per package, reads the benchmarks' MB/s over three runs and their
// median's ratio to their baseline's, and exits 1 for a failure. The real
// binaries need a GPU; the summary does not.
func TestGPUCheckSummarizes(t *testing.T) {
	if _, err := exec.LookPath("awk"); err != nil {
		t.Skip("no awk on PATH: gpu-check.sh needs it (apt-get install -y gawk)")
	}
	dir := t.TempDir()
	script, err := os.ReadFile("gpu-check.sh")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("gpu-check.sh is not here: this binary runs from the gpu-check bundle")
	}
	if err != nil {
		t.Fatal(err)
	}
	stand := map[string]string{
		"kernels-cuda.test": `case "$*" in
*test.list*) printf 'BenchmarkDeviceCopy\nBenchmarkKernelCopy\nBenchmarkPageIn\n' ;;
*bench*) for r in 1 2 3; do
  case $r in 1) d=2000000.00 k=1800000.00 ;; 2) d=2200000.00 k=1700000.00 ;; 3) d=1900000.00 k=1900000.00 ;; esac
  printf 'BenchmarkDeviceCopy-16   \t10\t 100 ns/op\t%s MB/s\nBenchmarkKernelCopy-16\t10\t 110 ns/op\t%s MB/s\n' $d $k
  printf 'BenchmarkPageIn/pinned-16\t10\t 9 ns/op\t1000.00 MB/s\nBenchmarkPageIn/page-major-16\t10\t 9 ns/op\t500.00 MB/s\n'
done; printf 'PASS\n' ;;
*) printf '=== RUN   TestPTXHasEntries\n--- PASS: TestPTXHasEntries (0.00s)\n=== RUN   TestMatchesCPU\n=== RUN   TestMatchesCPU/gqa/bf16\n--- PASS: TestMatchesCPU (1.20s)\n    --- PASS: TestMatchesCPU/gqa/bf16 (0.40s)\nPASS\n' ;;
esac`,
		"host-pool-cuda.test": `printf '=== RUN   TestDeviceArenaRoundTrip\n    cuda_test.go:61: LayerMajor slot 3 byte 9 differs\n--- FAIL: TestDeviceArenaRoundTrip (0.01s)\n=== RUN   TestIPCEngineSide\n    ipc_test.go:75: run by TestIPCHandleMapsInAnotherProcess\n--- SKIP: TestIPCEngineSide (0.00s)\nFAIL\n'; exit 1`,
	}
	for name, body := range stand {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(run, script, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", run)
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no nvidia-smi
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1 for a failed test\n%s", err, out)
	}
	var sum struct {
		GPU      string `json:"gpu"`
		Packages []struct {
			Name                    string
			Passed, Failed, Skipped int
			Failures, Skips         []string
		} `json:"packages"`
		Bench []struct {
			Package, Name, Baseline string
			Runs                    int
			MBs                     struct{ Min, Median, Max float64 } `json:"mb_per_s"`
			Vs                      float64                            `json:"vs_baseline"`
		} `json:"bench"`
		GPUFound bool `json:"gpu_found"`
		OK       bool `json:"ok"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if len(sum.Packages) != 2 || sum.OK || !sum.GPUFound {
		t.Fatalf("summary: %+v", sum)
	}
	pool, kern := sum.Packages[0], sum.Packages[1]
	if pool.Name != "host-pool-cuda" || pool.Failed != 1 || pool.Skipped != 1 ||
		len(pool.Failures) != 1 || !strings.Contains(pool.Failures[0], "TestDeviceArenaRoundTrip: cuda_test.go:61: LayerMajor slot 3") {
		t.Fatalf("pool package: %+v", pool)
	}
	if kern.Name != "kernels-cuda" || kern.Passed != 3 || kern.Failed != 0 {
		t.Fatalf("kernels package: %+v", kern)
	}
	if len(sum.Bench) != 4 {
		t.Fatalf("bench: %+v", sum.Bench)
	}
	dev, kc, pinned, pm := sum.Bench[0], sum.Bench[1], sum.Bench[2], sum.Bench[3]
	if dev.Name != "BenchmarkDeviceCopy" || dev.Runs != 3 || dev.MBs.Min != 1.9e6 || dev.MBs.Median != 2e6 || dev.MBs.Max != 2.2e6 || dev.Vs != 1 {
		t.Fatalf("device copy: %+v", dev)
	}
	// Without a group, the baseline is the package's first benchmark.
	if kc.Package != "kernels-cuda" || kc.Baseline != "BenchmarkDeviceCopy" || kc.MBs.Median != 1.8e6 || kc.Vs != 0.9 {
		t.Fatalf("kernel copy: %+v", kc)
	}
	// In a group (Name/sub), the group's first.
	if pinned.Vs != 1 || pm.Name != "BenchmarkPageIn/page-major" || pm.Baseline != "BenchmarkPageIn/pinned" || pm.Vs != 0.5 {
		t.Fatalf("page copies: %+v %+v", pinned, pm)
	}
}
