// Command kvpilot is the kvpilot host and its operator tools.
//
//	kvpilot serve   start the host beside an engine worker
//	kvpilot hash    print the block hashes of a token sequence
//	kvpilot bench   run a benchmark scenario (the kvpilot-bench command
//	                beside kvpilot, or on PATH)
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
	"sort"

	"github.com/kvpilot/kvpilot/host/cmd/internal/cliflag"
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

func main() { cliflag.Main(run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	helpOut = stdout
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
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
	case errors.Is(err, errRefused):
		return 1 // the reply said why, on stdout
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status) // kvpilot-bench said why, on the same stderr
	}
	fmt.Fprintf(stderr, "kvpilot %s: %v\n", c.Name, err)
	if hint := hintOf(err); hint != "" {
		fmt.Fprintf(stderr, "  hint: %s\n", hint)
	}
	var st interface{ ExitStatus() int }
	if errors.As(err, &st) && st.ExitStatus() != 0 {
		return st.ExitStatus() // e.g. 2: kvpilot-bench is missing
	}
	return 1
}

// hintOf is what the user can do about err (cliflag.HintOf).
func hintOf(err error) string { return cliflag.HintOf(err) }

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
