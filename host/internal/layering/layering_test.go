package layering

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/kvpilot/kvpilot"

// repoRoot is the folder holding go.mod, found upward from the test's own.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = up
	}
}

// layers reads the fenced ```layers block of ARCHITECTURE.md: a line a
// layer, the lowest first, each a list of package paths relative to the
// module, a trailing "/..." covering a folder and what is under it.
func layers(t *testing.T, root string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "host", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```layers":
			in = true
		case in && line == "```":
			return out
		case in && line != "":
			out = append(out, strings.Fields(line))
		}
	}
	t.Fatal("host/ARCHITECTURE.md has no ```layers block")
	return nil
}

// layerOf is the layer of pkg (relative to the module) by its longest
// matching pattern, -1 when none matches.
func layerOf(ls [][]string, pkg string) int {
	best, bestLen := -1, -1
	for i, l := range ls {
		for _, p := range l {
			base, tree := strings.CutSuffix(p, "/...")
			ok := pkg == base || tree && strings.HasPrefix(pkg, base+"/")
			if ok && len(base) > bestLen {
				best, bestLen = i, len(base)
			}
		}
	}
	return best
}

// imports maps each package of the module (relative path) to the module's
// packages its non-test files import.
func imports(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p := strings.Trim(im.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(p, module+"/"); ok {
				out[pkg][dep] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportsFollowTheLayers: no package imports one of a higher layer, and
// every package has a layer (host/ARCHITECTURE.md, "Layers").
func TestImportsFollowTheLayers(t *testing.T) {
	root := repoRoot(t)
	ls := layers(t, root)
	pkgs := imports(t, root)
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		lp := layerOf(ls, p)
		if lp < 0 {
			t.Errorf("%s is on no line of host/ARCHITECTURE.md's layers: add it to the layer of what it is", p)
			continue
		}
		for dep := range pkgs[p] {
			if ld := layerOf(ls, dep); ld > lp {
				t.Errorf("%s (layer %d: %s) imports %s (layer %d: %s), a higher layer: move the shared part down, or the package up",
					p, lp+1, strings.Join(ls[lp], " "), dep, ld+1, strings.Join(ls[ld], " "))
			}
		}
	}
}

// TestLayerOfUsesTheLongestMatch guards the matcher the rule rests on.
func TestLayerOfUsesTheLongestMatch(t *testing.T) {
	ls := [][]string{{"host/pool/..."}, {"host/pool/tiers", "host/cache"}}
	for pkg, want := range map[string]int{
		"host/pool":        0,
		"host/pool/memfd":  0,
		"host/pool/tiers":  1,
		"host/cache":       1,
		"host/cachebench":  -1,
		"host/poolside/x":  -1,
		"host/cache/inner": -1,
	} {
		if got := layerOf(ls, pkg); got != want {
			t.Errorf("layerOf(%q) = %d, want %d", pkg, got, want)
		}
	}
}
