package policy

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/kvpilot/kvpilot/sdk/policy/internal/wire"
)

// ErrNotLaunchedByHost is returned by Run when the binary was started by
// hand rather than by a kvpilot host.
var ErrNotLaunchedByHost = errors.New("this is a kvpilot policy plugin: the kvpilot host starts it (list it under `policies` in the host config)")

// Serve runs p as a plugin process and exits when the host is done with it.
// It is the whole of a plugin's main function. Run is the same with the
// error returned instead.
func Serve(p Policy) {
	if err := Run(p); err != nil {
		fmt.Fprintf(os.Stderr, "kvpilot policy: %v\n", err)
		os.Exit(1)
	}
}

// Run serves p until the host closes the connection, then calls p's
// optional Close.
func Run(p Policy) error {
	if os.Getenv(wire.Handshake.MagicCookieKey) != wire.Handshake.MagicCookieValue {
		return ErrNotLaunchedByHost
	}
	log := Logger().Named(p.Info().Name)
	gp := &grpcPlugin{impl: p, log: log}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         plugin.PluginSet{wire.PluginName: gp},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          log,
	})
	if gp.srv != nil {
		if err := gp.srv.close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
	}
	return nil
}

var (
	loggerOnce sync.Once
	logger     hclog.Logger
)

// Logger returns the plugin's logger: hclog JSON on the process's original
// stderr, which the host parses into its own log with the plugin's name.
// Never log to stdout; it carries the go-plugin handshake.
func Logger() hclog.Logger {
	loggerOnce.Do(func() {
		logger = hclog.New(&hclog.LoggerOptions{
			Level:      hclog.LevelFromString(envOr("KVPILOT_POLICY_LOG_LEVEL", "info")),
			Output:     os.Stderr,
			JSONFormat: true,
		})
	})
	return logger
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
