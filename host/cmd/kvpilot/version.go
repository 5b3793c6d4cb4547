package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time (make build passes
// -ldflags "-X main.version=... -X main.commit=..."); a build without them
// reports what Go stamped in the binary, or "devel" and "unknown".
var version, commit = "", ""

func init() {
	registerCommand(command{
		Name:    "version",
		Summary: "print the version, the commit it was built from and the Go version",
		Run:     runVersion,
	})
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", "Prints kvpilot's version, the commit it was built from, and the Go version.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs, fmt.Errorf("takes no arguments, got %q", fs.Args()))
	}
	v, rev, dirty := version, commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " (modified)"
				}
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(stdout, "kvpilot %s\ncommit %s%s\n%s %s/%s\n", v, rev, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
