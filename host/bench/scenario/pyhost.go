package scenario

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// pyHostRun is a Python benchmark driver (a kvbench module) run as a child
// against a real host started in this process (a Rig, host only), so every
// cached page crosses the memfd pools and the engine protocol a deployment
// uses; the driver brings its own engine.
type pyHostRun struct {
	// Python runs the child (FindPython resolves an empty one).
	Python string
	// Module is the kvbench module (python -m); Args its arguments, to
	// which the host's --engine-socket and --control-socket are added.
	Module string
	Args   []string
	// Rig shapes the host; HostOnly and Log are set here.
	Rig RigOptions
	// Stderr receives the child's and the host's logs; nil discards them.
	Stderr io.Writer
}

// run starts the host, runs the child and returns what it printed on
// stdout; a failed child's error carries its last error line.
func (r pyHostRun) run(ctx context.Context) ([]byte, error) {
	py, err := FindPython(r.Python)
	if err != nil {
		return nil, err
	}
	o := r.Rig
	o.HostOnly = true
	o.Log = hclog.NewNullLogger()
	if r.Stderr != nil {
		o.Log = hclog.New(&hclog.LoggerOptions{Name: "host", Output: r.Stderr, Level: hclog.Warn})
	}
	rig, err := StartRig(ctx, o)
	if err != nil {
		return nil, err
	}
	defer rig.Close()

	args := append([]string{"--engine-socket", rig.Config.EngineSocket(),
		"--control-socket", rig.Daemon.ControlSocket()}, r.Args...)
	return runDriver(ctx, py, r.Module, args, r.Stderr, 5*time.Second)
}

// runDriver runs python -m module args and returns what it printed on
// stdout; stderr (nil: discarded) gets its log. Interrupted, the child gets
// SIGTERM, so its finally blocks stop what it started, and SIGKILL only
// after grace. A failed child's error carries its last error line.
func runDriver(ctx context.Context, py, module string, args []string, stderr io.Writer, grace time.Duration) ([]byte, error) {
	cmd := exec.CommandContext(ctx, py, append([]string{"-m", module}, args...)...)
	var err error
	if cmd.Env, err = PythonEnv(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	errTail := &tail{max: 16 << 10}
	cmd.Stdout = &out
	cmd.Stderr = errTail
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, errTail)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = grace
	if err := cmd.Run(); err != nil {
		return nil, childError(py, module, err, errTail.String())
	}
	return out.Bytes(), nil
}
