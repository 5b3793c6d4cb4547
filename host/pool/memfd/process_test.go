package memfd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/pool/fdpass"
)

// The child process is this test binary re-executed with the socket path in
// this variable; TestHelperProcess does nothing without it.
const childEnv = "KVPILOT_MEMFD_CHILD_SOCKET"

type offer struct {
	Handle pool.Handle
	Layout layout.Layout
}

// TestFDToAnotherProcess hands an arena's memfd to a real second process
// over a Unix socket. The child maps it, checks a page the parent wrote,
// and writes another page the parent then reads: both see one memory.
func TestFDToAnotherProcess(t *testing.T) {
	for _, arr := range []layout.Arrangement{layout.PageMajor, layout.LayerMajor} {
		t.Run(arr.String(), func(t *testing.T) {
			a := newArena(t, arr, 4)
			pb := a.Layout().PageBytes()
			s, err := a.Alloc(nil, 4)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.WritePage(s[1], fill(make([]byte, pb), 1)); err != nil {
				t.Fatal(err)
			}

			sock := filepath.Join(t.TempDir(), "engine.sock")
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+sock)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			l.SetDeadline(time.Now().Add(10 * time.Second))
			c, err := l.AcceptUnix()
			if err != nil {
				cmd.Process.Kill()
				t.Fatalf("child did not connect: %v\n%s", err, out.String())
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			h := a.Handle()
			msg, _ := json.Marshal(offer{Handle: h, Layout: *a.Layout()})
			if err := fdpass.Send(c, msg, h.FD); err != nil {
				t.Fatal(err)
			}
			reply := make([]byte, 4096)
			n, _, err := fdpass.Recv(c, reply)
			if err != nil {
				t.Fatalf("no reply from child: %v\n%s", err, out.String())
			}
			if string(reply[:n]) != "ok" {
				t.Fatalf("child: %s\n%s", reply[:n], out.String())
			}
			got := make([]byte, pb)
			if err := a.ReadPage(s[2], got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, fill(make([]byte, pb), 99)) {
				t.Fatal("the page the child wrote is not in the parent's arena")
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child exited with %v\n%s", err, out.String())
			}
		})
	}
}

// TestHelperProcess is the child side of TestFDToAnotherProcess.
func TestHelperProcess(t *testing.T) {
	sock := os.Getenv(childEnv)
	if sock == "" {
		t.Skip("child process of TestFDToAnotherProcess only")
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reply := func(s string) {
		if err := fdpass.Send(c, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 1<<16)
	n, fds, err := fdpass.Recv(c, buf)
	if err != nil || len(fds) != 1 {
		reply(fmt.Sprintf("recv: %d fds, %v", len(fds), err))
		return
	}
	var o offer
	if err := json.Unmarshal(buf[:n], &o); err != nil {
		reply("decode offer: " + err.Error())
		return
	}
	v, err := OpenView(fds[0], o.Handle, &o.Layout)
	if err != nil {
		reply(err.Error())
		return
	}
	defer v.Close()
	pb := o.Layout.PageBytes()
	got := make([]byte, pb)
	if err := v.ReadPage(1, got); err != nil {
		reply(err.Error())
		return
	}
	if !bytes.Equal(got, fill(make([]byte, pb), 1)) {
		reply("slot 1 holds different bytes in the child")
		return
	}
	if err := v.WritePage(2, fill(make([]byte, pb), 99)); err != nil {
		reply(err.Error())
		return
	}
	reply("ok")
}
