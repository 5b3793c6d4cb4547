package scenario

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// pythonRel is where the benchmarks' Python drivers (the kvbench package)
// live, from the repository's root. They are not part of the installed
// kvpilot package, so a child Python finds them through PYTHONPATH.
const pythonRel = "host/bench/python"

// PythonEnv is this process's environment with the benchmark drivers'
// folder put first on PYTHONPATH: the kvpilot repository holding the working
// directory (the benchmarks run from the repository, as the traces do).
func PythonEnv() ([]string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("benchmark drivers: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, pythonRel, "kvbench")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(p); err == nil {
				path := filepath.Join(dir, pythonRel)
				if old := os.Getenv("PYTHONPATH"); old != "" {
					path += string(os.PathListSeparator) + old
				}
				return append(withoutVar(os.Environ(), "PYTHONPATH"), "PYTHONPATH="+path), nil
			}
		}
		if filepath.Dir(dir) == dir {
			return nil, fmt.Errorf("benchmark drivers: no %s above %s: run kvpilot bench from the kvpilot repository", pythonRel, wd)
		}
	}
}

// withoutVar drops every NAME= entry from env.
func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// FindPython resolves the interpreter that has the kvpilot package:
// explicit, else $KVPILOT_PYTHON, else .venv/bin/python in the working
// directory or a parent (make py-env builds it), else python3.
func FindPython(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv("KVPILOT_PYTHON")
	}
	if explicit != "" {
		return explicit, nil
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			p := filepath.Join(dir, ".venv", "bin", "python")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	return "", errors.New("no Python found: set KVPILOT_PYTHON, or run make py-env in the repository")
}
