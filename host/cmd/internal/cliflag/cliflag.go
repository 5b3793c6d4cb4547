// Package cliflag holds the flag habits the kvpilot commands share (kvpilot
// and kvpilot-bench, which `kvpilot bench` runs): Go-style flags allowed
// anywhere among the positional arguments, asked-for help on stdout with
// status 0, and parse errors reported once, as ErrUsage (status 2).
package cliflag

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// ErrUsage marks an error already explained to the user by a usage
// message; the commands exit 2 on it.
var ErrUsage = errors.New("usage")

// Main runs a command: run gets the command line's arguments and the
// standard streams, under a context that Ctrl-C and SIGTERM cancel, and
// the process exits with the status it returns.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// UsageError is a usage error that says itself what was wrong (a flag's
// value out of its range): the commands print it and exit 2, as for
// ErrUsage.
type UsageError string

func (e UsageError) Error() string { return string(e) }

// Is makes a UsageError an ErrUsage.
func (UsageError) Is(target error) bool { return target == ErrUsage }

// Usagef is a UsageError with the message format and args make.
func Usagef(format string, args ...any) error { return UsageError(fmt.Sprintf(format, args...)) }

// New returns a flag set for the command line name ("kvpilot hash") that
// writes its errors to stderr (its help, asked for, goes to the writer
// Parse is given) and prints the synopsis and description as its usage.
func New(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s %s\n\n%s\n", name, synopsis, description)
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

// Parse parses args with flags allowed anywhere among the positional
// arguments (`ctl cache H --ttl 5m`), keeping the positional ones in
// order; a negative number is an argument, not a flag. --help prints the
// help to helpOut and returns flag.ErrHelp (exit 0); a parse failure
// becomes ErrUsage (the flag package has already printed what was wrong).
func Parse(fs *flag.FlagSet, args []string, helpOut io.Writer) error {
	return parse(fs, interleaved(fs, args), helpOut)
}

// ParseLeading parses the flags before the first positional argument
// only: for a command whose first argument names a subcommand with flags
// of its own.
func ParseLeading(fs *flag.FlagSet, args []string, helpOut io.Writer) error {
	return parse(fs, args, helpOut)
}

func parse(fs *flag.FlagSet, args []string, helpOut io.Writer) error {
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
		return ErrUsage
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

// HintOf is what the user can do about err, printed under it: its
// registry code's hint, or the hint the error carries itself (a Hint
// method), "" when neither.
func HintOf(err error) string {
	if e, ok := errcode.As(err); ok && e.Entry().Hint != "" {
		return e.Entry().Hint
	}
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}
