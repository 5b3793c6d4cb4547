package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/daemon"
	"github.com/kvpilot/kvpilot/host/logging"
	"github.com/kvpilot/kvpilot/host/preflight"
	"github.com/kvpilot/kvpilot/sdk/chunktok"
)

func init() {
	registerCommand(command{
		Name:    "serve",
		Summary: "run the host beside an engine worker (embedded defaults, or --config FILE)",
		Run:     runServe,
	})
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[--config FILE]",
		"Starts the kvpilot host: loads the configuration (built-in defaults, then\n"+
			"FILE, then KVPILOT_* environment variables), opens the cache index and serves\n"+
			"/healthz and /metrics until interrupted. Invalid configuration fails at start\n"+
			"with the offending key named.", stderr)
	path := fs.String("config", os.Getenv(config.EnvConfigFile), "YAML config file (default $"+config.EnvConfigFile+"; none: built-in defaults)")
	check := fs.Bool("check", false, "load and validate the configuration, print it as YAML on stdout, and exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs, fmt.Errorf("takes no arguments, got %q", fs.Args()))
	}
	cfg, err := config.Load(*path, os.Environ())
	if err != nil {
		return err
	}
	log := logging.New(stderr, cfg.Log.Level, cfg.Log.Format)
	if *check {
		// What the host checks against the machine at start: its
		// directories, and tier sizes when a model is configured.
		if err := preflight.Check(cfg); err != nil {
			return err
		}
		out, err := cfg.YAML()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "# configuration ok: the built-in defaults, then the file, then KVPILOT_* variables\n%s", out)
		return nil
	}
	var opts []daemon.Option
	if *path != "" {
		opts = append(opts, daemon.WithConfigFile(*path, os.Environ()))
	}
	if cfg.Engine.Tokenizer == chunktok.Name {
		opts = append(opts, daemon.WithTokenizer(func(text string) ([]uint32, error) { return chunktok.Tokenize(text), nil }))
	}
	d, err := daemon.New(cfg, log, opts...)
	if err != nil {
		return fmt.Errorf("start host: %w", err)
	}
	return d.Run(ctx)
}
