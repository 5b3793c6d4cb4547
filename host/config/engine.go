package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Engine is the gRPC kvpilot.v1.Engine service on a Unix socket, where the
// inference engine registers its layout and runs its requests.
// Its socket is secured like Control's: a private directory, a 0600 socket
// (0660 with a group) and a peer-uid allow-list.
type Engine struct {
	// Socket is the socket path; empty means <data_dir>/run/engine.sock.
	// The descriptor side channel listens beside it (EngineFDSocket).
	Socket string `koanf:"socket"`
	// Group, when set, makes the sockets 0660 owned by this group.
	Group string `koanf:"group"`
	// AllowUIDs are peer uids accepted besides the host's own.
	AllowUIDs []int `koanf:"allow_uids"`
	// LoadBackDeadline bounds how long a Match waits for pages to come back
	// from colder tiers before it serves the prefix already on the device.
	LoadBackDeadline time.Duration `koanf:"load_back_deadline"`
	// RequestTTL releases a request the engine left idle this long (its
	// locks and unused slots), e.g. after the engine crashed.
	RequestTTL time.Duration `koanf:"request_ttl"`
	// Tokenizer turns text splice replacements (the truncation policy's
	// stubs) into tokens. Empty: none, and such splices are refused as
	// not_supported_yet, since the engine owns its tokenizer. "chunk4" is
	// the reference engine's (sdk/chunktok), for demos and benchmarks.
	Tokenizer string `koanf:"tokenizer"`
	// MaxSessions bounds the sessions whose latest cached token sequence the
	// host remembers; the least recently used is forgotten first.
	MaxSessions int `koanf:"max_sessions"`
}

// EngineSocket is the Engine service's socket path.
func (c Config) EngineSocket() string {
	if c.Engine.Socket != "" {
		return c.Engine.Socket
	}
	return filepath.Join(c.DataDir, "run", "engine.sock")
}

// EngineFDSocket is the descriptor side channel's socket, beside the engine
// socket: engine.sock gives engine-fd.sock.
func (c Config) EngineFDSocket() string {
	p := c.EngineSocket()
	dir, base := filepath.Split(p)
	return filepath.Join(dir, strings.TrimSuffix(base, ".sock")+"-fd.sock")
}

func (c Config) validateEngine() []error {
	var errs []error
	if c.Engine.Tokenizer != "" && c.Engine.Tokenizer != "chunk4" {
		errs = append(errs, fmt.Errorf("%w: engine.tokenizer: %q is not \"\" (none) or \"chunk4\"", ErrInvalid, c.Engine.Tokenizer))
	}
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
	}
	if c.Engine.LoadBackDeadline <= 0 {
		bad("engine.load_back_deadline", "must be positive, got %v", c.Engine.LoadBackDeadline)
	}
	if c.Engine.RequestTTL <= 0 {
		bad("engine.request_ttl", "must be positive, got %v", c.Engine.RequestTTL)
	}
	if c.Engine.MaxSessions < 1 {
		bad("engine.max_sessions", "must be at least 1, got %d", c.Engine.MaxSessions)
	}
	for i, u := range c.Engine.AllowUIDs {
		if u < 0 {
			bad(fmt.Sprintf("engine.allow_uids[%d]", i), "uid %d is negative", u)
		}
	}
	if c.EngineSocket() == c.ControlSocket() {
		bad("engine.socket", "%s is the control socket too; give each service its own", c.EngineSocket())
	}
	return errs
}
