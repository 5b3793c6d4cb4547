package engineclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

// claimFDs fetches a registration's memfd descriptors from the host's
// descriptor socket (the side channel of sdk/enginewire).
func claimFDs(ctx context.Context, path string, token []byte, want int) ([]int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("descriptor socket %s: %w", path, err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	deadline := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = uc.SetDeadline(deadline)
	if _, err := uc.Write(enginewire.EncodeFDRequest(token)); err != nil {
		return nil, fmt.Errorf("descriptor socket %s: send claim: %w", path, err)
	}
	buf := make([]byte, enginewire.FDReplyMax)
	oob := make([]byte, unix.CmsgSpace(4*16))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("descriptor socket %s: read reply: %w", path, err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("descriptor socket: control message: %w", err)
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range got {
				unix.CloseOnExec(fd)
			}
			fds = append(fds, got...)
		}
	}
	count, reason, err := enginewire.DecodeFDReply(buf[:n])
	if err == nil && count != len(fds) {
		err = fmt.Errorf("%w: reply says %d descriptors, %d arrived", enginewire.ErrFDProtocol, count, len(fds))
	}
	if err == nil && count == 0 && want > 0 {
		err = errors.New("host refused the descriptor claim: " + reason)
	}
	if err == nil && count != want {
		err = fmt.Errorf("%w: %d descriptors for %d memfd pools", enginewire.ErrFDProtocol, count, want)
	}
	if err != nil {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return nil, err
	}
	return fds, nil
}
