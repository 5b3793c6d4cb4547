// Command errgen writes sdk/errcode's registry (registry_gen.go) and the
// Python SDK's exception classes from sdk/errcode/errors.json. It runs from
// go generate in sdk/errcode:
//
//	go generate ./sdk/errcode
package main

import (
	"fmt"
	"os"

	"github.com/kvpilot/kvpilot/sdk/errcode/internal/errspec"
)

// Paths are relative to sdk/errcode, where go generate runs it.
const (
	specPath   = "errors.json"
	goPath     = "registry_gen.go"
	pythonPath = "../python/kvpilot/_errcodes.py"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "errgen:", err)
		os.Exit(1)
	}
}

func run() error {
	s, err := errspec.Load(specPath)
	if err != nil {
		return err
	}
	goSrc, err := s.RenderGo()
	if err != nil {
		return err
	}
	if err := os.WriteFile(goPath, goSrc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", goPath, err)
	}
	if err := os.WriteFile(pythonPath, s.RenderPython(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", pythonPath, err)
	}
	return nil
}
