package scenario

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// The benchmarks' Python drivers (the kvbench package under
// host/bench/python, not part of the installed package) run as children.

// FindPython resolves the interpreter that has the kvpilot package:
// explicit, else $KVPILOT_PYTHON, else .venv/bin/python in the working
// directory or a parent (make py-env builds it), else python3.
func FindPython(explicit string) (string, error) {
	if py := cmp.Or(explicit, os.Getenv("KVPILOT_PYTHON")); py != "" {
		return py, nil
	}
	venv := filepath.Join(".venv", "bin", "python")
	if dir, ok := findUp(venv); ok {
		return filepath.Join(dir, venv), nil
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	return "", errors.New("no Python found: set KVPILOT_PYTHON, or run make py-env in the repository")
}

// From the repository's root: the drivers' folder, and the Python SDK's
// (the kvpilot package).
const driversRel, sdkRel = "host/bench/python", "sdk/python"

// driversPath is the PYTHONPATH a driver runs with, from the repository at
// root: the drivers, then the SDK, then old (the caller's PYTHONPATH). The
// SDK comes before any installed kvpilot so a benchmark measures the tree
// it runs from: git worktrees sharing one .venv share its editable
// install, which imports the checkout that made it.
func driversPath(root, old string) string {
	sep := string(os.PathListSeparator)
	path := filepath.Join(root, driversRel) + sep + filepath.Join(root, sdkRel)
	if old != "" {
		path += sep + old
	}
	return path
}

// findUp is the nearest directory, the working directory or a parent,
// that holds rel.
func findUp(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			return dir, true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
		dir = filepath.Dir(dir)
	}
}

// runDriver runs python -m module args from the repository holding the
// working directory (the benchmarks run from it, as the traces do) and
// returns what it printed on stdout; stderr (nil: discarded) gets its log.
// Interrupted, the child gets SIGTERM, so its finally blocks stop what it
// started, and SIGKILL only after grace.
func runDriver(ctx context.Context, py, module string, args []string, stderr io.Writer, grace time.Duration) ([]byte, error) {
	root, ok := findUp(filepath.Join(driversRel, "kvbench"))
	if !ok {
		return nil, fmt.Errorf("benchmark drivers: no %s above the working directory: run kvpilot bench from the kvpilot repository", driversRel)
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-m", module}, args...)...)
	// The last of a name wins.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+driversPath(root, os.Getenv("PYTHONPATH")))
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, &errs)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = grace
	if err := cmd.Run(); err != nil {
		return nil, childError(py, module, root, err, errs.String())
	}
	return out.Bytes(), nil
}

// ChildError is a Python child that failed: its exit and the last error
// line it printed (a traceback's "ModuleNotFoundError: No module named
// 'torch'"); its hint is what the user can do.
type ChildError struct {
	msg, hint string
	err       error
}

func (e *ChildError) Error() string { return e.msg }
func (e *ChildError) Unwrap() error { return e.err }
func (e *ChildError) Hint() string  { return e.hint }

// errorLine matches the line a Python traceback ends with.
var errorLine = regexp.MustCompile(`^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|Killed)\b.*`)

// childError explains the failure of python -m module, run from the
// repository at root, from its stderr: the install command when a module
// was missing, else where the child's whole output is.
func childError(py, module, root string, err error, stderr string) *ChildError {
	ce := &ChildError{msg: fmt.Sprintf("%s -m %s: %v", py, module, err), err: err,
		hint: "run again with -v to see the Python side's whole output"}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	last := ""
	for i := len(lines) - 1; i >= 0 && last == ""; i-- {
		if l := strings.TrimSpace(lines[i]); errorLine.MatchString(l) {
			last = l
			ce.msg += ": " + l
		}
	}
	if strings.HasPrefix(last, "ModuleNotFoundError: No module named ") {
		// Whatever the module, the pinned lock has it (or make py-env).
		pkg := filepath.Join(root, sdkRel)
		ce.hint = fmt.Sprintf("install what the benchmark's Python side needs: %s -m pip install --no-deps -r %s && %s -m pip install --no-deps -e %s (or make py-env in %s, whose .venv is found on its own)",
			py, filepath.Join(pkg, "requirements.txt"), py, pkg, root)
	}
	return ce
}
