package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// With no scenario named the command lists them on stdout; an unknown one
// is a usage error (status 2) that lists them on stderr; a scenario's
// help goes to stdout and names the command users type, kvpilot bench.
func TestListHelpAndUsage(t *testing.T) {
	for _, c := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{nil, 0, "Scenarios:", ""},
		{[]string{"list"}, 0, "Scenarios:", ""},
		{[]string{"no-such-scenario"}, 2, "", `unknown scenario "no-such-scenario"`},
		{[]string{"control", "--help"}, 0, "Usage: kvpilot bench control", ""},
	} {
		code, out, errs := runCLI(c.args...)
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errs, c.errs) {
			t.Errorf("%v: status %d, stdout %.80q, stderr %.80q; want %d, %q, %q", c.args, code, out, errs, c.code, c.stdout, c.errs)
		}
	}
}
