package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// Flags may follow the positional arguments, in any order, and keep their
// values; a negative number and "-" are arguments; "--" ends the flags.
func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args []string
		n    int
		v    bool
		pos  []string
	}{
		{[]string{"a", "--n", "3", "b"}, 3, false, []string{"a", "b"}},
		{[]string{"-v", "a", "--n=4"}, 4, true, []string{"a"}},
		{[]string{"-9143094415614847814", "--n", "5"}, 5, false, []string{"-9143094415614847814"}},
		{[]string{"-", "a", "--", "--n", "6"}, 0, false, []string{"-", "a", "--n", "6"}},
	} {
		fs := New("kvpilot test", "[args]", "A test.", io.Discard)
		n := fs.Int("n", 0, "a number")
		v := fs.Bool("v", false, "a switch")
		if err := Parse(fs, c.args, io.Discard); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if *n != c.n || *v != c.v || !slices.Equal(fs.Args(), c.pos) {
			t.Errorf("%q: n %d, v %v, args %q; want %d, %v, %q", c.args, *n, *v, fs.Args(), c.n, c.v, c.pos)
		}
	}
}

// Asked-for help goes to the help writer and is flag.ErrHelp; a bad flag
// is reported on stderr once and is ErrUsage.
func TestHelpAndUsageErrors(t *testing.T) {
	var stderr, help bytes.Buffer
	fs := New("kvpilot test", "[args]", "A test.", &stderr)
	fs.Int("n", 0, "a number")
	if err := Parse(fs, []string{"a", "--help"}, &help); !errors.Is(err, flag.ErrHelp) ||
		!strings.HasPrefix(help.String(), "Usage: kvpilot test [args]\n\nA test.\n\nFlags:\n") || stderr.Len() != 0 {
		t.Errorf("--help: %v, help %q, stderr %q", err, help.String(), stderr.String())
	}
	fs = New("kvpilot test", "[args]", "A test.", &stderr)
	if err := ParseLeading(fs, []string{"--nope"}, &help); !errors.Is(err, ErrUsage) || !strings.Contains(stderr.String(), "nope") {
		t.Errorf("--nope: %v, stderr %q", err, stderr.String())
	}
}
