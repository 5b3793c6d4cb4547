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
	"strings"
	"syscall"
	"unicode"

	"github.com/kvpilot/kvpilot/sdk/errcode"
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
	helpOut = stdout
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
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
	case errors.Is(err, errRefused):
		return 1 // the reply said why, on stdout
	default:
		fmt.Fprintf(stderr, "kvpilot %s: %v\n", c.Name, err)
		if e, ok := errcode.As(err); ok && e.Entry().Hint != "" {
			fmt.Fprintf(stderr, "  hint: %s\n", e.Entry().Hint)
		}
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

// newFlagSet returns a flag set that writes its errors to stderr (its help,
// asked for, goes to stdout: see parseFlags) and reports parse errors as
// errUsage, so run maps them to exit status 2.
func newFlagSet(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kvpilot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: kvpilot %s %s\n\n%s\n", name, synopsis, description)
		if hasFlags(fs) {
			fmt.Fprintf(w, "\nFlags:\n")
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

// helpOut is where asked-for help goes: the command's stdout (run sets it).
var helpOut io.Writer = os.Stdout

// parseFlags parses args with flags allowed anywhere among the positional
// arguments (`ctl cache H --ttl 5m`), keeping the positional ones in order;
// a negative number is an argument, not a flag. --help prints the help to
// stdout and returns flag.ErrHelp (exit 0); a parse failure becomes
// errUsage (the flag package has already printed what was wrong).
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parse(fs, interleaved(fs, args))
}

// parseLeadingFlags parses the flags before the first positional argument
// only: for a command whose first argument names a subcommand with flags
// of its own.
func parseLeadingFlags(fs *flag.FlagSet, args []string) error { return parse(fs, args) }

func parse(fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(helpOut)
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// interleaved moves the flags of args (with their values) before the
// positional arguments, which follow a "--".
func interleaved(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		name, hasValue := flagName(a)
		if name == "" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

// flagName is the name of a flag argument ("-x", "--x", "--x=v"), or ""
// for a positional one (including "-" and negative numbers).
func flagName(a string) (name string, hasValue bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if name == "" || !unicode.IsLetter(rune(name[0])) {
		return "", false
	}
	if i := strings.IndexByte(name, '='); i >= 0 {
		return name[:i], true
	}
	return name, false
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
