package enginetest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const envHost = "KVPILOT_ENGINETEST_HOST"

// MaybeHostMain turns this process into a test host when Spawn started it:
// call it first in TestMain. It returns at once otherwise.
func MaybeHostMain() {
	js := os.Getenv(envHost)
	if js == "" {
		return
	}
	os.Exit(hostMain(js))
}

func hostMain(js string) int {
	var o Options
	if err := json.Unmarshal([]byte(js), &o); err != nil {
		fmt.Fprintln(os.Stderr, "enginetest host: options:", err)
		return 2
	}
	h, err := Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "enginetest host:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	fmt.Println("ready", h.Service.BootID())
	select {
	case <-sig:
	case <-stdinClosed: // the parent went away
	}
	if err := h.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "enginetest host: close:", err)
		return 1
	}
	return 0
}

// Process is a test host running in a child process.
type Process struct {
	Socket string
	BootID string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan error
	err    error // the exit, once waited for
}

// wait returns the process's exit, waiting at most d (0: forever).
func (p *Process) wait(d time.Duration) (error, bool) {
	var timeout <-chan time.Time
	if d > 0 {
		timeout = time.After(d)
	}
	select {
	case err, ok := <-p.done:
		if ok {
			p.err = err
			close(p.done)
		}
		return p.err, true
	case <-timeout:
		return nil, false
	}
}

// Spawn re-executes the test binary as a host with o and waits until it
// serves. The test binary's TestMain must call MaybeHostMain.
func Spawn(o Options) (*Process, error) {
	js, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHost+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("spawn test host: %w", err)
	}
	p := &Process{Socket: SocketPath(o.Dir), cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "ready ") {
				ready <- strings.TrimPrefix(line, "ready ")
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { p.done <- cmd.Wait() }()
	select {
	case boot := <-ready:
		p.BootID = boot
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("test host exited before serving: %v", err)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("test host did not start within 30s")
	}
}

// Kill ends the host with SIGKILL, as a crash would.
func (p *Process) Kill() error {
	_ = p.cmd.Process.Kill()
	p.wait(0)
	return nil
}

// Stop asks the host to shut down and waits for it.
func (p *Process) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err, ok := p.wait(10 * time.Second); ok {
		return err
	}
	_ = p.cmd.Process.Kill()
	p.wait(0)
	return errors.New("test host did not stop within 10s; killed")
}
