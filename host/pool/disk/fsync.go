package disk

import "fmt"

// FsyncPolicy says when page writes reach stable storage.
type FsyncPolicy uint8

const (
	// FsyncBatch syncs when the mover finishes a batch (Sync). The default.
	FsyncBatch FsyncPolicy = iota
	// FsyncAlways syncs after every Put and Delete.
	FsyncAlways
	// FsyncNever leaves it to the kernel: fastest, loses recent pages on a
	// power cut (they are detected by checksum, not served).
	FsyncNever
)

var fsyncNames = [...]string{"batch", "always", "never"}

func (p FsyncPolicy) String() string {
	if p.Valid() {
		return fsyncNames[p]
	}
	return fmt.Sprintf("fsync(%d)", uint8(p))
}

// Valid reports whether p is a known policy.
func (p FsyncPolicy) Valid() bool { return int(p) < len(fsyncNames) }

// ParseFsyncPolicy reads always, batch or never.
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	for i, n := range fsyncNames {
		if s == n {
			return FsyncPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown fsync policy %q: want always, batch or never", s)
}
