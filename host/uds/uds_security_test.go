package uds

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Two sockets share a directory, the first opened to a group: listening on
// the second, without a group, keeps the directory's group traverse right
// (or the first socket's group could no longer reach it) while the second
// socket itself stays 0600. The daemon's Engine and Control sockets sit
// side by side like this under <data_dir>/run.
func TestGroupedSocketBesideAPrivateOne(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to give the socket to another group: run it as root (sudo -E env PATH=\"$PATH\" go test -run TestGroupedSocketBesideAPrivateOne ./host/uds/)")
	}
	grouped := sockPath(t)
	private := filepath.Join(filepath.Dir(grouped), "private.sock")
	a, err := Listen(Options{Path: grouped, Group: fmt.Sprint(4242)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Listen(Options{Path: private})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if fi, _ := os.Stat(filepath.Dir(grouped)); fi.Mode().Perm() != 0o710 {
		t.Fatalf("shared directory tightened to %v: the grouped socket is cut off", fi.Mode().Perm())
	}
	for p, want := range map[string]os.FileMode{grouped: 0o660, private: 0o600} {
		if fi, _ := os.Stat(p); fi.Mode().Perm() != want {
			t.Fatalf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}
