package fdpass

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan *net.UnixConn, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	s := <-done
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func TestSendRecv(t *testing.T) {
	a, b := pair(t)
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("kvpilot"); err != nil {
		t.Fatal(err)
	}
	if err := Send(a, []byte("hello"), int(f.Fd()), int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, fds, err := Recv(b, buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "hello" || len(fds) != 2 {
		t.Fatalf("got %q with %d fds", buf[:n], len(fds))
	}
	for _, fd := range fds {
		var st1, st2 unix.Stat_t
		if err := unix.Fstat(fd, &st1); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fstat(int(f.Fd()), &st2); err != nil {
			t.Fatal(err)
		}
		if st1.Ino != st2.Ino || st1.Dev != st2.Dev {
			t.Fatal("received fd names a different file")
		}
		if fd == int(f.Fd()) {
			t.Fatal("received fd is the sender's number: nothing was passed")
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("received fd is not close-on-exec (flags %d, %v)", flags, err)
		}
		unix.Close(fd)
	}
	// A plain message has no fds.
	if err := Send(a, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, fds, err := Recv(b, buf); err != nil || len(fds) != 0 {
		t.Fatalf("plain message: %d fds, %v", len(fds), err)
	}
	if err := Send(a, nil, 1); err == nil {
		t.Fatal("empty message accepted")
	}
	if err := Send(a, []byte("x"), make([]int, MaxFDs+1)...); err == nil {
		t.Fatal("too many fds accepted")
	}
}
