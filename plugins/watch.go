package plugins

import (
	"context"
	"errors"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/knadh/koanf/providers/file"

	"github.com/kvpilot/kvpilot/host/config"
)

// WatchConfig hot-swaps the policy set whenever the `policies` section of
// the config file at path changes, until ctx ends. It follows editors that
// write in place and editors that write a new file and rename it over the
// old one (koanf's file watch sees the directory, not the inode). Each
// change is re-read with config.Load (environ as at start); an invalid file,
// or a set that fails to start, is logged and rejected, and the running set
// stays. Call Swap first: the file is compared with the set the runtime
// runs, not with the file as it was when the watch began, so an edit made
// before the watch (between the host's start and its Run, on a loaded
// machine) is applied at once, from the file as the watch first read it.
func (r *Runtime) WatchConfig(ctx context.Context, path string, environ []string) error {
	// The poll's baseline stamp is taken before the first read, not in the
	// poll's goroutine: an edit made while the watch starts changes the
	// stamp after it, and is read again.
	last := fileStamp(path)
	started, err := config.Load(path, environ)
	if err != nil {
		return err
	}
	// started is what the host runs with, but for policies; pending names
	// the keys edited since, already reported.
	var pending []string
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			// Watch until the watcher fails (the file was removed), then
			// wait for the file to come back and watch again: editors that
			// delete before they write do that.
			stopped := make(chan struct{})
			var once sync.Once
			stop := func() { once.Do(func() { close(stopped) }) }
			fp := file.Provider(path)
			err := fp.Watch(func(_ any, err error) {
				if err != nil {
					stop()
					return
				}
				notify()
			})
			if err != nil {
				stop()
			}
			select {
			case <-ctx.Done():
				_ = fp.Unwatch()
				return
			case <-stopped:
			}
			for {
				if _, err := os.Stat(path); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			notify() // it may have changed while unwatched
		}
	}()
	// A stat poll backs the watch up: file events can be missed or
	// coalesced (network and overlay filesystems, a read racing a write in
	// place), and a reload that finds nothing new costs one config load.
	go func() {
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st := fileStamp(path); st != last {
				last = st
				notify()
			}
		}
	}()
	apply := func(c config.Config) {
		if r.runs(c.Policies) {
			return
		}
		if err := r.Swap(ctx, c.Policies); err != nil {
			if errors.Is(err, ErrStart) || errors.Is(err, ErrClosed) {
				r.reloads.rejected.Add(1)
				r.log.Error("policy hot-swap rejected; the running policies stay", "path", path, "error", err)
				return
			}
			r.log.Warn("policy hot-swap finished with errors", "error", err)
		}
		r.reloads.applied.Add(1)
	}
	go func() {
		apply(started)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			// Editors write in several steps; read once they settle, and
			// again when the file changed while it was read.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			drainSignal(changed)
			before := fileStamp(path)
			c, err := config.Load(path, environ)
			if fileStamp(path) != before {
				notify()
				continue
			}
			if err != nil {
				r.reloads.rejected.Add(1)
				r.log.Error("config reload rejected; the running policies stay", "path", path, "error", err)
				continue
			}
			// Only policies change live; say so of every other key edited,
			// once per edit, rather than ignore it silently.
			keys := restartKeys(started, c)
			if len(keys) > 0 && !reflect.DeepEqual(keys, pending) {
				r.log.Warn("config keys changed that need a restart to apply; the host keeps running with the old values",
					"path", path, "keys", keys)
			}
			pending = keys
			apply(c)
		}
	}()
	return nil
}

// runs reports whether the running set is specs, in order.
func (r *Runtime) runs(specs []config.Policy) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.set) != len(specs) {
		return false
	}
	for i, s := range specs {
		if !sameSpec(r.set[i].spec, s) {
			return false
		}
	}
	return true
}

// restartKeys names the top-level keys (as in the file) whose values differ
// between a and b, but for policies, which change live.
func restartKeys(a, b config.Config) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var keys []string
	for i := 0; i < va.NumField(); i++ {
		name := va.Type().Field(i).Tag.Get("koanf")
		if name == "" || name == "policies" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			keys = append(keys, name)
		}
	}
	return keys
}

// pollEvery is how often the config file is stat'ed as a backstop to
// file events.
const pollEvery = 2 * time.Second

// stamp identifies a version of a file well enough to notice an edit.
type stamp struct {
	size    int64
	modTime time.Time
}

func fileStamp(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	return stamp{fi.Size(), fi.ModTime()}
}

func drainSignal(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}
