package cache

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The index's rules as scripts (testdata/*.txt), in the style of pebble's
// and etcd raft's datadriven tests. A script is a list of cases:
//
//	# a comment, kept as it is
//	command key=value flag
//	input line
//	----
//	expected output
//
// A case's expected output runs to the next blank line (an output never
// holds one). Cases run in order on one index, so each sees what the
// earlier ones left. `go test ./host/cache -run TestScripts -rewrite`
// writes what the index does now as the expected output: review the
// diff, it is the change in behaviour.

var rewrite = flag.Bool("rewrite", false, "write the index's output into host/cache/testdata scripts instead of comparing")

// scriptCase is one case of a script.
type scriptCase struct {
	pos   string // file:line, for messages
	cmd   string
	args  map[string][]string
	input []string
	// raw is the case's text up to and including its "----" line, and lead
	// the comments and blank lines before it, both kept for -rewrite.
	raw, lead string
	want      string
}

// arg returns the last value of key, or def.
func (c *scriptCase) arg(key, def string) string {
	if v := c.args[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// has reports whether the case names key (as a flag or with a value).
func (c *scriptCase) has(key string) bool {
	_, ok := c.args[key]
	return ok
}

// parseScript reads a script's cases; trail is what follows the last one.
func parseScript(path string) (cases []*scriptCase, trail string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	lines := strings.Split(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var lead strings.Builder
	for i := 0; i < len(lines); {
		line := lines[i]
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			lead.WriteString(line + "\n")
			i++
			continue
		}
		c := &scriptCase{pos: fmt.Sprintf("%s:%d", filepath.Base(path), i+1), args: map[string][]string{}, lead: lead.String()}
		lead.Reset()
		fields := strings.Fields(line)
		c.cmd = fields[0]
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			c.args[k] = append(c.args[k], v)
		}
		raw := []string{line}
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			raw = append(raw, lines[i])
			c.input = append(c.input, lines[i])
		}
		if i == len(lines) {
			return nil, "", fmt.Errorf("%s: %q has no ---- line", c.pos, c.cmd)
		}
		c.raw = strings.Join(append(raw, "----"), "\n") + "\n"
		var want []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		c.want = strings.Join(want, "\n")
		cases = append(cases, c)
	}
	return cases, lead.String(), nil
}

// runScripts runs every script matching glob, each on a fresh state that
// run reads its cases against.
func runScripts[S any](t *testing.T, glob string, fresh func(t *testing.T) S, run func(s S, c *scriptCase) string) {
	paths, err := filepath.Glob(glob)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts match %s (%v)", glob, err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			cases, trail, err := parseScript(path)
			if err != nil {
				t.Fatal(err)
			}
			s := fresh(t)
			var out strings.Builder
			for _, c := range cases {
				got := strings.TrimRight(run(s, c), "\n")
				if strings.Contains(got, "\n\n") {
					t.Fatalf("%s: %s wrote a blank line, which ends a case:\n%s", c.pos, c.cmd, got)
				}
				out.WriteString(c.lead + c.raw)
				if got != "" {
					out.WriteString(got + "\n")
				}
				if !*rewrite && got != c.want {
					t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", c.pos, c.raw, got, c.want)
				}
			}
			out.WriteString(trail)
			if *rewrite {
				if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestScriptParser: a script's comments, cases and trailing text survive a
// rewrite byte for byte when the outputs are what they were.
func TestScriptParser(t *testing.T) {
	const script = "# a rule\n\ncmd a=1 b flag\nin 1\nin 2\n----\nout 1\nout 2\n\n# after\ncmd2\n----\n\n# end\n"
	path := filepath.Join(t.TempDir(), "s.txt")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cases, trail, err := parseScript(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 2 {
		t.Fatalf("%d cases", len(cases))
	}
	c := cases[0]
	if c.cmd != "cmd" || c.arg("a", "") != "1" || !c.has("b") || !c.has("flag") || c.has("c") ||
		strings.Join(c.input, "|") != "in 1|in 2" || c.want != "out 1\nout 2" || c.pos != "s.txt:3" {
		t.Fatalf("case 0: %+v", c)
	}
	if cases[1].cmd != "cmd2" || cases[1].want != "" {
		t.Fatalf("case 1: %+v", cases[1])
	}
	back := cases[0].lead + cases[0].raw + cases[0].want + "\n" + cases[1].lead + cases[1].raw + trail
	if back != script {
		t.Fatalf("rewritten script differs:\n%q\nwant:\n%q", back, script)
	}
	if err := os.WriteFile(path, []byte("cmd\nno separator\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := parseScript(path); err == nil {
		t.Fatal("a case without ---- parsed")
	}
}
