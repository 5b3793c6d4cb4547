// Package fdpass sends and receives file descriptors over a Unix socket
// with SCM_RIGHTS, so the host can give the engine its memfd arenas: the
// receiving process gets its own descriptor for the same memory.
package fdpass

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// MaxFDs is the most descriptors one message carries; the host sends at
// most one per tier.
const MaxFDs = 16

// ErrNoFDs is returned by Recv when a message arrived without the
// descriptors the caller required.
var ErrNoFDs = errors.New("message carried no file descriptors")

// Send writes msg (at least one byte: a stream socket cannot carry
// ancillary data alone) with fds attached. The caller keeps its fds.
func Send(c *net.UnixConn, msg []byte, fds ...int) error {
	if len(msg) == 0 {
		return fmt.Errorf("fdpass send: empty message (the fds need at least one byte to ride on)")
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("fdpass send: %d fds, limit %d", len(fds), MaxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("fdpass send: %w", err)
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("fdpass send: short write (%d/%d bytes, %d/%d control)", n, len(msg), oobn, len(oob))
	}
	return nil
}

// Recv reads one message into buf and returns its length and the fds that
// came with it. The fds are close-on-exec and owned by the caller.
func Recv(c *net.UnixConn, buf []byte) (int, []int, error) {
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return n, nil, fmt.Errorf("fdpass recv: %w", err)
	}
	fds, perr := parseRights(oob[:oobn])
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll(fds)
		return n, nil, fmt.Errorf("fdpass recv: control data truncated (more than %d fds sent)", MaxFDs)
	}
	if perr != nil {
		closeAll(fds)
		return n, nil, perr
	}
	for _, fd := range fds {
		// Go's ReadMsgUnix does not pass MSG_CMSG_CLOEXEC; set it here so a
		// child the receiver starts does not inherit the arena.
		unix.CloseOnExec(fd)
	}
	return n, fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("fdpass recv: parse control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("fdpass recv: parse rights: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
