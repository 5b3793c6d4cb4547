package preflight

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/pool/tiers"
)

// memAvailable is the memory the host may still take: MemAvailable in
// /proc/meminfo, or less when the host's cgroup limits it (a container's
// memory limit counts the pools' shared memory too).
func memAvailable() (int64, string, error) {
	avail, err := meminfo("MemAvailable")
	if err != nil {
		return 0, "", err
	}
	source := "MemAvailable in /proc/meminfo"
	if left, ok := cgroupLeft(); ok && left < avail {
		avail, source = left, "the limit of the host's cgroup less its usage"
	}
	return avail, source, nil
}

func meminfo(field string) (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo %s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/meminfo has no %s", field)
}

// cgroupLeft is the host's cgroup memory limit less its usage (cgroup v2,
// then v1), when there is a limit.
func cgroupLeft() (int64, bool) {
	for _, p := range [][2]string{
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
	} {
		limit, err1 := readInt(p[0])
		used, err2 := readInt(p[1])
		// v1 writes a huge number for "no limit", v2 writes "max".
		if err1 == nil && err2 == nil && limit < 1<<60 {
			return max(limit-used, 0), true
		}
	}
	return 0, false
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// diskFree is the space an unprivileged writer may still take on the
// filesystem of dir, or of its nearest existing parent.
func diskFree(dir string) (int64, error) {
	p := filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return int64(st.Bavail) * st.Bsize, nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) || parent == p {
			return 0, err
		}
		p = parent
	}
}

// allocated is the space a file already takes on disk (0 when absent).
func allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// gpuBackend reports whether the device tier will be GPU memory.
func gpuBackend(backend string) bool {
	b, _ := tiers.ParseBackend(backend) // validated with the config
	return b == tiers.BackendCUDA || (b == tiers.BackendAuto && tiers.GPUPresent())
}
