package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvpilot/kvpilot/host/config"
)

// hostProc is a `kvpilot serve` process on a data directory of its own,
// which a fault kills or stops and which then starts again on the same
// directory and sockets.
type hostProc struct {
	binary, dir, configPath, logPath string
	cfg                              config.Config

	// mu guards cmd and exited: a fault replaces them while the sampler
	// reads the process's memory.
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startHost writes cfg (its data directory dir) and starts the host.
func startHost(ctx context.Context, binary, dir string, cfg map[string]any) (*hostProc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cfg["data_dir"] = filepath.Join(dir, "data")
	b, err := json.Marshal(cfg) // JSON is YAML
	if err != nil {
		return nil, err
	}
	h := &hostProc{binary: binary, dir: dir, configPath: filepath.Join(dir, "kvpilot.yaml"), logPath: filepath.Join(dir, "host.log")}
	if err := os.WriteFile(h.configPath, b, 0o600); err != nil {
		return nil, err
	}
	if h.cfg, err = config.Load(h.configPath, nil); err != nil {
		return nil, fmt.Errorf("agents: host config: %w", err)
	}
	return h, h.start(ctx)
}

func (h *hostProc) engineSocket() string  { return h.cfg.EngineSocket() }
func (h *hostProc) controlSocket() string { return h.cfg.ControlSocket() }

func (h *hostProc) start(ctx context.Context) error {
	logf, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(h.binary, "serve", "--config", h.configPath)
	// The host reads KVPILOT_* as configuration: the bench's own settings
	// are in the file alone.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KVPILOT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("agents: start %s serve: %w", h.binary, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	h.mu.Lock()
	h.cmd, h.exited = cmd, exited
	h.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for _, sock := range []string{h.engineSocket(), h.controlSocket()} {
		for !accepts(sock) {
			select {
			case <-exited:
				return fmt.Errorf("agents: the host exited at start: see %s", h.logPath)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("agents: the host's %s does not accept after a minute: see %s", sock, h.logPath)
			}
		}
	}
	return nil
}

// signal sends sig and waits for the host to exit (SIGKILL after 30 s).
func (h *hostProc) signal(sig syscall.Signal) {
	h.mu.Lock()
	cmd, exited := h.cmd, h.exited
	h.cmd = nil
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (h *hostProc) stop() { h.signal(syscall.SIGTERM) }

// rss is the host's resident memory in bytes (0 when it is down).
func (h *hostProc) rss() int64 {
	h.mu.Lock()
	cmd := h.cmd
	h.mu.Unlock()
	if cmd == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return n << 10
				}
			}
		}
	}
	return 0
}

func accepts(path string) bool {
	c, err := net.Dial("unix", path)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
