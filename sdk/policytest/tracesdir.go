package policytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TracesEnv names a directory of trace files that stands in for the
// repository's own (examples/traces), for a checkout or a working directory
// elsewhere, or for other sessions in the same format.
const TracesEnv = "KVPILOT_TRACES"

// tracesRel is where the repository keeps its agent traces, from its root.
const tracesRel = "examples/traces"

// ErrNoTraces means no traces directory was found.
var ErrNoTraces = errors.New("no agent traces found")

// TracesDir is the directory holding the agent traces: $KVPILOT_TRACES when
// set, else examples/traces of the kvpilot checkout that holds the working
// directory (tests run in their package's folder, the benchmarks and the demo
// from the repository), found by walking up to the folder with go.mod.
func TracesDir() (string, error) {
	if d := os.Getenv(TracesEnv); d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return "", fmt.Errorf("%s=%s is not a directory: %w", TracesEnv, d, ErrNoTraces)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("traces: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, tracesRel)
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				return p, nil
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", fmt.Errorf("%w under %s or its parents (run from the kvpilot repository, or set %s to a traces directory)", ErrNoTraces, wd, TracesEnv)
}

// TracePath is the path of the named trace file: the name itself when it is
// a path that exists, else the file of that base name in TracesDir.
func TracePath(name string) (string, error) {
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	dir, err := TracesDir()
	if err != nil {
		return "", fmt.Errorf("trace %s: %w", name, err)
	}
	p := filepath.Join(dir, filepath.Base(name))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("trace %s: not in %s (pass a path, or set %s to the folder that holds it): %w", name, dir, TracesEnv, err)
	}
	return p, nil
}

// LoadNamedTraces reads a trace file named as TracePath resolves it.
func LoadNamedTraces(name string) ([]Trace, error) {
	p, err := TracePath(name)
	if err != nil {
		return nil, err
	}
	return LoadTraces(p)
}
