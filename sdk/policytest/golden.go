package policytest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files under testdata instead of comparing")

// Golden compares got with the file at path (relative to the test's
// package), or writes it when the test runs with -rewrite.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *rewrite {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run with -rewrite to create it)", path, err)
	}
	if !bytes.Equal(want, got) {
		line := 1
		for i := 0; i < len(want) && i < len(got); i++ {
			if want[i] != got[i] {
				break
			}
			if want[i] == '\n' {
				line++
			}
		}
		t.Fatalf("golden %s differs from line %d (run with -rewrite after checking the change)", path, line)
	}
}
