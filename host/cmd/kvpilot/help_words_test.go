package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// insiderWords are references a user cannot follow: the design notes and
// papers the project was built from are not in the repository.
var insiderWords = regexp.MustCompile(`DESIGN\.md|§|Leyline|App\. B|\bseed (PIN|Cache|run|command)`)

// Every help text speaks the user's words: the top-level usage, each
// command's, each ctl verb's and each bench scenario's (run through
// kvpilot-bench, as users run them).
func TestHelpSpeaksTheUsersWords(t *testing.T) {
	benchOnPath(t)
	runs := [][]string{{"--help"}, {"bench"}}
	for name := range commands {
		runs = append(runs, []string{name, "--help"})
	}
	for verb := range ctlVerbs {
		runs = append(runs, []string{"ctl", verb, "--help"})
	}
	scenarios := benchScenarios(t)
	for _, name := range scenarios {
		runs = append(runs, []string{"bench", name, "--help"})
	}
	for _, args := range runs {
		code, out, errs := runCLI(args...)
		if code != 0 || out == "" {
			t.Errorf("%v: status %d, stdout %q, stderr %q", args, code, out, errs)
		}
		if m := insiderWords.FindString(out + errs); m != "" {
			t.Errorf("%v: help says %q, which the user cannot look up:\n%s", args, m, out)
		}
	}
}

// benchScenarios are the scenarios `kvpilot bench` lists: the first word
// of each line under "Scenarios:".
func benchScenarios(t *testing.T) []string {
	t.Helper()
	code, out, errs := runCLI("bench")
	_, list, ok := strings.Cut(out, "Scenarios:\n")
	if code != 0 || !ok {
		t.Fatalf("bench: status %d, stdout %q, stderr %q", code, out, errs)
	}
	var names []string
	for _, l := range strings.Split(list, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		names = append(names, f[0])
	}
	if len(names) < 10 {
		t.Fatalf("bench lists %d scenarios: %q", len(names), names)
	}
	return names
}

// No string the programs can print (help, errors, reports) refers to them
// either: every string literal outside tests, in the whole module.
func TestNoMessageRefersToInsiderNotes(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && insiderWords.MatchString(s) {
				t.Errorf("%s: %q refers to notes outside the repository", fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if err != nil || files < 100 {
		t.Fatalf("walked %d Go files: %v", files, err)
	}
}
