package uds

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sockPath(t *testing.T) string {
	// t.TempDir paths can exceed the 107-byte sun_path limit.
	dir, err := os.MkdirTemp("", "uds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "run", "control.sock")
}

func echoOnce(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
}

func TestModesAndEcho(t *testing.T) {
	p := sockPath(t)
	ln, err := Listen(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	echoOnce(ln)
	fi, _ := os.Stat(filepath.Dir(p))
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	fi, _ = os.Lstat(p)
	if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v, want 0600 socket", fi.Mode())
	}
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}

func TestGroupMode(t *testing.T) {
	p := sockPath(t)
	ln, err := Listen(Options{Path: p, Group: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, _ := os.Lstat(p)
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660 with a group", fi.Mode().Perm())
	}
	fi, _ = os.Stat(filepath.Dir(p))
	if fi.Mode().Perm() != 0o710 {
		t.Errorf("dir mode %v, want 0710 with a group", fi.Mode().Perm())
	}
	if _, err := Listen(Options{Path: sockPath(t), Group: "no-such-group-kvpilot"}); err == nil {
		t.Error("unknown group accepted")
	}
}

func TestTightensLooseDirectory(t *testing.T) {
	p := sockPath(t)
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(p), 0o777)
	ln, err := Listen(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, _ := os.Stat(filepath.Dir(p)); fi.Mode().Perm() != 0o700 {
		t.Errorf("loose dir left at %v", fi.Mode().Perm())
	}
}

func TestStaleSocketUnlinkedLiveOneKept(t *testing.T) {
	p := sockPath(t)
	// A stale socket: bound, then the process "dies" without unlinking.
	os.MkdirAll(filepath.Dir(p), 0o700)
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	ln, err := Listen(Options{Path: p})
	if err != nil {
		t.Fatalf("stale socket not cleared: %v", err)
	}
	defer ln.Close()
	echoOnce(ln)
	if _, err := Listen(Options{Path: p}); !errors.Is(err, ErrInUse) {
		t.Fatalf("live socket: got %v, want ErrInUse", err)
	}
	// The live listener must still work.
	if c, err := net.Dial("unix", p); err != nil {
		t.Fatalf("live socket was stolen: %v", err)
	} else {
		c.Close()
	}
}

func TestNotASocketRefused(t *testing.T) {
	p := sockPath(t)
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte("data"), 0o600)
	if _, err := Listen(Options{Path: p}); err == nil {
		t.Fatal("regular file replaced by a socket")
	}
	if b, _ := os.ReadFile(p); string(b) != "data" {
		t.Fatal("regular file was touched")
	}
}

func TestPeerUIDChecked(t *testing.T) {
	p := sockPath(t)
	ln, err := Listen(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Pretend this process's uid is not allowed: only 4242 is.
	deny := map[int]bool{4242: true}
	ln.allow.Store(&deny)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("refused peer could read %d bytes", n)
	}
	select {
	case <-accepted:
		t.Fatal("a disallowed uid reached the server")
	case <-time.After(100 * time.Millisecond):
	}
	// Allow our uid: the next connection gets through.
	ln.SetAllowUIDs(nil)
	c2, err := net.Dial("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case s := <-accepted:
		cred, err := PeerCred(s.(*net.UnixConn))
		if err != nil || int(cred.Uid) != os.Getuid() || int(cred.Pid) != os.Getpid() {
			t.Fatalf("peer cred %+v %v", cred, err)
		}
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("allowed peer not accepted")
	}
}

func TestLongPathRejected(t *testing.T) {
	long := os.TempDir()
	for len(long) < 120 {
		long += "/abcdefghij"
	}
	if _, err := Listen(Options{Path: long + "/s.sock"}); err == nil {
		t.Fatal("over-long path accepted")
	}
}
