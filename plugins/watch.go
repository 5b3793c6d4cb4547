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
	w := &configWatch{r: r, path: path, environ: environ, started: started, changed: make(chan struct{}, 1)}
	go w.watchFile(ctx)
	go w.poll(ctx, last)
	go w.reload(ctx)
	return nil
}

// configWatch is one WatchConfig: its file, the config the host started
// with and the signal that the file may have changed.
type configWatch struct {
	r       *Runtime
	path    string
	environ []string
	// started is what the host runs with, but for policies.
	started config.Config
	changed chan struct{}
}

func (w *configWatch) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// watchFile follows the file's events until ctx ends. When the watcher
// fails (the file was removed) it waits for the file to come back and
// watches again: editors that delete before they write do that.
func (w *configWatch) watchFile(ctx context.Context) {
	for {
		stopped := make(chan struct{})
		var once sync.Once
		stop := func() { once.Do(func() { close(stopped) }) }
		fp := file.Provider(w.path)
		err := fp.Watch(func(_ any, err error) {
			if err != nil {
				stop()
				return
			}
			w.notify()
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
			if _, err := os.Stat(w.path); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		w.notify() // it may have changed while unwatched
	}
}

// poll backs the watch up with a stat poll from the baseline stamp last:
// file events can be missed or coalesced (network and overlay
// filesystems, a read racing a write in place), and a reload that finds
// nothing new costs one config load.
func (w *configWatch) poll(ctx context.Context, last stamp) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st := fileStamp(w.path); st != last {
			last = st
			w.notify()
		}
	}
}

// reload applies the file as the watch first read it, then each change
// once the file settles, until ctx ends.
func (w *configWatch) reload(ctx context.Context) {
	w.apply(ctx, w.started)
	// pending names the keys edited since the start, already reported.
	var pending []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
		}
		// Editors write in several steps; read once they settle, and
		// again when the file changed while it was read.
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		drainSignal(w.changed)
		before := fileStamp(w.path)
		c, err := config.Load(w.path, w.environ)
		if fileStamp(w.path) != before {
			w.notify()
			continue
		}
		if err != nil {
			w.r.reloads.rejected.Add(1)
			w.r.log.Error("config reload rejected; the running policies stay", "path", w.path, "error", err)
			continue
		}
		// Only policies change live; say so of every other key edited,
		// once per edit, rather than ignore it silently.
		keys := restartKeys(w.started, c)
		if len(keys) > 0 && !reflect.DeepEqual(keys, pending) {
			w.r.log.Warn("config keys changed that need a restart to apply; the host keeps running with the old values",
				"path", w.path, "keys", keys)
		}
		pending = keys
		w.apply(ctx, c)
	}
}

// apply swaps to c's policies unless they are the running set.
func (w *configWatch) apply(ctx context.Context, c config.Config) {
	if w.r.runs(c.Policies) {
		return
	}
	if err := w.r.Swap(ctx, c.Policies); err != nil {
		if errors.Is(err, ErrStart) || errors.Is(err, ErrClosed) {
			w.r.reloads.rejected.Add(1)
			w.r.log.Error("policy hot-swap rejected; the running policies stay", "path", w.path, "error", err)
			return
		}
		w.r.log.Warn("policy hot-swap finished with errors", "error", err)
	}
	w.r.reloads.applied.Add(1)
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
