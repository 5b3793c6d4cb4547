package main

import (
	"flag"
	"io"
	"os"

	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
)

// The flag habits live in cliflag, shared with kvpilot-bench; these keep
// the commands' call sites short.

// errUsage marks an error already explained to the user by a usage message.
var errUsage = cliflag.ErrUsage

// helpOut is where asked-for help goes: the command's stdout (run sets it).
var helpOut io.Writer = os.Stdout

// newFlagSet returns the flag set of `kvpilot <name>` (see cliflag.New).
func newFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	return cliflag.New("kvpilot "+name, synopsis, description, stderr)
}

// parseFlags parses args with flags allowed anywhere among the positional
// arguments (see cliflag.Parse).
func parseFlags(fs *flag.FlagSet, args []string) error { return cliflag.Parse(fs, args, helpOut) }

// parseLeadingFlags parses the flags before the first positional argument
// only: for a command whose first argument names a subcommand with flags
// of its own.
func parseLeadingFlags(fs *flag.FlagSet, args []string) error {
	return cliflag.ParseLeading(fs, args, helpOut)
}
