package main

import (
	"flag"
	"fmt"
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

// usageError reports err, a mistake in a command's arguments that parsing
// the flags could not catch, where the flag package reports its own (the
// flag set's output, stderr), with the error's hint and where to read the
// usage, and makes it a usage error: status 2, as for a bad flag.
func usageError(fs *flag.FlagSet, err error) error {
	w := fs.Output()
	fmt.Fprintf(w, "%s: %v\n", fs.Name(), err)
	if hint := hintOf(err); hint != "" {
		fmt.Fprintf(w, "  hint: %s\n", hint)
	}
	fmt.Fprintf(w, "Run '%s --help' for its usage.\n", fs.Name())
	return errUsage
}
