// Command kvpilot is the kvpilot host and its operator tools.
//
//	kvpilot serve   start the host beside an engine worker
//	kvpilot hash    print the block hashes of a token sequence
//	kvpilot bench   run a benchmark scenario
//
// Every subcommand takes Go-style flags; `kvpilot <command> --help` explains
// them. Only the subcommands' own output goes to stdout; logs go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of kvpilot.
type command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func registerCommand(c command) {
	if _, dup := commands[c.Name]; dup {
		panic("kvpilot: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// errUsage marks an error already explained to the user by a usage message.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvpilot: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := c.Run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "kvpilot %s: %v\n", c.Name, err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "kvpilot: a steerable KV cache host for LLM inference workers.\n\n")
	fmt.Fprintf(w, "Usage:\n  kvpilot <command> [flags] [args]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun 'kvpilot <command> --help' for a command's flags.\n")
}

// newFlagSet returns a flag set that writes its help to stderr and reports
// parse errors as errUsage, so run maps them to exit status 2.
func newFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kvpilot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kvpilot %s %s\n\n%s\n", name, synopsis, description)
		if hasFlags(fs) {
			fmt.Fprintf(stderr, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args, turning a parse failure into errUsage (the flag
// package has already printed what was wrong).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
