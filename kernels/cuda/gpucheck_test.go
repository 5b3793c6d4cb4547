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
// skips per package, reads the benchmarks' MB/s and their ratio to the
// device copy, and exits 1 for a failure. The real binaries need a GPU;
// the summary does not.
func TestGPUCheckSummarizes(t *testing.T) {
	if _, err := exec.LookPath("awk"); err != nil {
		t.Skip("no awk")
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
*bench*) printf 'goos: linux\nBenchmarkDeviceCopy-16   \t10\t 100 ns/op\t2000000.00 MB/s\nBenchmarkKernelCopy-16\t10\t 110 ns/op\t1800000.00 MB/s\nPASS\n' ;;
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
		Bench    map[string]float64 `json:"bench_mb_per_s"`
		Vs       map[string]float64 `json:"vs_device_copy"`
		GPUFound bool               `json:"gpu_found"`
		OK       bool               `json:"ok"`
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
	if sum.Bench["BenchmarkKernelCopy"] != 1.8e6 || sum.Vs["BenchmarkKernelCopy"] != 0.9 {
		t.Fatalf("bench: %v %v", sum.Bench, sum.Vs)
	}
}
