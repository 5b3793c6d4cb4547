package main

import (
	"flag"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
)

// The flag habits are kvpilot's own (cliflag), so that `kvpilot bench`
// reads like every other kvpilot command.

// errUsage marks an error already explained to the user by a usage message.
var errUsage = cliflag.ErrUsage

// helpOut is where asked-for help goes: stdout (run sets it).
var helpOut io.Writer = os.Stdout

// newFlagSet returns the flag set of `kvpilot <name>` ("bench control"):
// users reach the scenarios through kvpilot, so their help names it.
func newFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	return cliflag.New("kvpilot "+name, synopsis, description, stderr)
}

// parseFlags parses args with flags allowed anywhere among the positional
// arguments (see cliflag.Parse).
func parseFlags(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args, helpOut) }
