// Package preflight checks a configuration against the machine the host
// runs on, before anything is allocated or served: the directories the host
// writes (data_dir, pools.disk_dir) can be made and written, the memory
// tiers fit in the memory the host may use, and the disk tier fits on its
// filesystem. A tier's size is known only with its layout, so the sizes are
// checked at start (and by `serve --check`) when the configuration names a
// model, else when an engine registers its layout, before the pools open.
//
// A failure names the key, what was asked and what the machine has. It
// wraps config.ErrInvalid: a permanent configuration error, which an
// engine's registration reports as misconfigured, never as transient.
package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/layout"
)

// Start runs the checks the host runs when it starts: the directories,
// made as the host makes them, and, when the configuration names a model,
// the tiers' sizes with the device tier as the configured backend places
// it.
func Start(c config.Config) error {
	return check(c, true)
}

// Check is Start for `serve --check`: it removes the directories it had to
// make to find them writable.
func Check(c config.Config) error {
	return check(c, false)
}

func check(c config.Config, keep bool) error {
	if err := Dirs(c, keep); err != nil {
		return err
	}
	l, ok, err := c.Layout()
	if err != nil || !ok {
		return err // Load validated the model; without one, registration checks
	}
	return Sizes(c, &l, DeviceInRAM(c, false))
}

// Dirs checks that data_dir and, with a disk tier, pools.disk_dir are
// directories the host can make and write in. keep leaves the directories
// it made.
func Dirs(c config.Config, keep bool) error {
	if err := writableDir("data_dir", c.DataDir, keep); err != nil || c.Tiers.Disk.CapacityPages == 0 {
		return err
	}
	key := "pools.disk_dir"
	if c.Pools.DiskDir == "" {
		key = "data_dir (the disk tier's <data_dir>/disk)"
	}
	return writableDir(key, c.DiskDir(), keep)
}

// invalid is a configuration error naming key.
func invalid(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", config.ErrInvalid, key, fmt.Sprintf(format, args...))
}

// Detail is err's text without the "invalid configuration: " in front: the
// key and the reason, for a registry error's detail.
func Detail(err error) string {
	return strings.TrimPrefix(err.Error(), config.ErrInvalid.Error()+": ")
}

// writableDir makes dir (and its missing parents) and writes a file in it.
func writableDir(key, dir string, keep bool) error {
	if dir == "" {
		return nil // Validate refuses an empty data_dir
	}
	var made []string // deepest first
	for p := filepath.Clean(dir); ; {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return invalid(key, "%s is not a directory (%s is a file)", dir, p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return invalid(key, "%s cannot be used: %v", dir, err)
		}
		made = append(made, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return invalid(key, "cannot make the directory %s: %v", dir, err)
	}
	if !keep {
		defer func() {
			for _, p := range made {
				_ = os.Remove(p)
			}
		}()
	}
	f, err := os.CreateTemp(dir, ".kvpilot-check-*")
	if err != nil {
		return invalid(key, "cannot write in %s: %v", dir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return invalid(key, "cannot remove a file from %s: %v", dir, err)
	}
	return nil
}

// DeviceInRAM reports whether the device tier is host memory: a connector
// engine's staging tier, the memfd backend, or auto without a usable GPU.
func DeviceInRAM(c config.Config, staging bool) bool {
	return staging || !gpuBackend(c.Pools.DeviceBackend)
}

// layoutBytes is a page's size in bytes.
func layoutBytes(l *layout.Layout) int64 { return int64(l.PageBytes()) }
