package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// ChildError is a Python child that failed: its exit, the last error line
// it printed (a traceback's "ModuleNotFoundError: No module named
// 'torch'"), and the command that installs what it lacked.
type ChildError struct {
	Python string
	Module string // the driver it ran with -m (a kvbench module)
	Err    error  // the exit
	Last   string // the last error line on its stderr; "" when none
	// Install is what to run when a module was missing: the lock's pins
	// into that interpreter, or the package names outside the repository.
	Install string
}

func (e *ChildError) Error() string {
	if e.Last == "" {
		return fmt.Sprintf("%s -m %s: %v", e.Python, e.Module, e.Err)
	}
	return fmt.Sprintf("%s -m %s: %v: %s", e.Python, e.Module, e.Err, e.Last)
}

func (e *ChildError) Unwrap() error { return e.Err }

// Hint is what the user can do: the install command when a module was
// missing, else where the child's whole output is.
func (e *ChildError) Hint() string {
	if e.Install != "" {
		return "install what the benchmark's Python side needs: " + e.Install
	}
	return "run again with -v to see the Python side's whole output"
}

// errorLine matches the line a Python traceback ends with.
var errorLine = regexp.MustCompile(`^([A-Za-z_][\w.]*(Error|Exception|Interrupt)|Killed)\b.*`)

// missingModule matches the error of an import that failed.
var missingModule = regexp.MustCompile(`^ModuleNotFoundError: No module named '([\w.]+)'`)

// childError explains a child's failure from the tail of its stderr.
func childError(py, module string, err error, stderr string) *ChildError {
	ce := &ChildError{Python: py, Module: module, Err: err}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); errorLine.MatchString(l) {
			ce.Last = l
			break
		}
	}
	if m := missingModule.FindStringSubmatch(ce.Last); m != nil {
		ce.Install = installCommand(py, strings.SplitN(m[1], ".", 2)[0])
	}
	return ce
}

// installCommand installs the repository's pinned Python lock and the
// kvpilot package into py, from the repository the working directory is
// in; outside one, the missing module by name.
func installCommand(py, module string) string {
	if root, ok := repoRoot(); ok {
		reqs, pkg := filepath.Join(root, "sdk", "python", "requirements.txt"), filepath.Join(root, "sdk", "python")
		return fmt.Sprintf("%s -m pip install --no-deps -r %s && %s -m pip install --no-deps -e %s (or make py-env in %s, whose .venv is found on its own)",
			py, reqs, py, pkg, root)
	}
	if module == "kvpilot" {
		return py + " -m pip install ./sdk/python (from the repository)"
	}
	return py + " -m pip install " + module
}

// repoRoot is the repository holding the working directory: the nearest
// directory with sdk/python/requirements.txt.
func repoRoot() (string, bool) {
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "sdk", "python", "requirements.txt")); err == nil {
			return dir, true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
