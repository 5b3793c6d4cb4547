package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// `kvpilot bench` runs the kvpilot-bench command. The benchmark harnesses
// (a reference engine, traces, in-process hosts) are a second binary so the
// production one carries none of them; this file is all kvpilot knows of
// them.

// benchCommand is the binary `kvpilot bench` runs; `make build` puts it
// beside kvpilot in bin/.
const benchCommand = "kvpilot-bench"

// errBenchMissing: kvpilot-bench is neither beside kvpilot nor on PATH.
var errBenchMissing = errors.New(benchCommand + " not found")

func init() {
	registerCommand(command{
		Name:    "bench",
		Summary: "run a benchmark scenario and print its table (or --json)",
		Run:     runBench,
	})
}

// runBench runs kvpilot-bench with args on this process's stdin and the
// given stdout and stderr, and returns its exit status as an exitStatus
// (nil for 0). A stop of kvpilot (Ctrl-C, SIGTERM) is passed on to it.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	exeDir := ""
	if exe, err := os.Executable(); err == nil {
		exeDir = filepath.Dir(exe)
	}
	path, err := findBench(exeDir)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", path, err)
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The child may have exited already: nothing to stop then.
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-exited:
		}
	}()
	err = cmd.Wait()
	close(exited)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitStatus(128 + int(ws.Signal())) // as a shell reports it
		}
		return exitStatus(ee.ExitCode())
	default:
		return fmt.Errorf("wait for %s: %w", path, err)
	}
}

// findBench returns the kvpilot-bench beside kvpilot (in exeDir), so that
// bin/kvpilot runs the bin/kvpilot-bench built with it, else the one on
// PATH.
func findBench(exeDir string) (string, error) {
	where := "on PATH"
	if exeDir != "" {
		p := filepath.Join(exeDir, benchCommand)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		where = "in " + exeDir + " or on PATH"
	}
	p, err := exec.LookPath(benchCommand)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, exec.ErrNotFound):
		err = fmt.Errorf("%w %s (the benchmark scenarios are a separate command)", errBenchMissing, where)
	default: // found, but not usable: say why
		err = fmt.Errorf("%w %s: %w", errBenchMissing, where, err)
	}
	// Status 2, not 1: 1 is kvpilot-bench's own "a --check target was
	// missed", which a script must not read into a missing binary.
	return "", hinted{err: err, hint: "run `make build`, which builds kvpilot and kvpilot-bench into bin/ together", status: 2}
}

// exitStatus is a child command's exit status, passed on as kvpilot's own:
// the child has already said what went wrong.
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

// hinted is an error with a hint: what the user can do about it, and the
// exit status kvpilot ends with after saying so (0: the usual 1).
type hinted struct {
	err    error
	hint   string
	status int
}

func (h hinted) Error() string   { return h.err.Error() }
func (h hinted) Unwrap() error   { return h.err }
func (h hinted) Hint() string    { return h.hint }
func (h hinted) ExitStatus() int { return h.status }
