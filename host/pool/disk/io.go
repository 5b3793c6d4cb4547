package disk

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// pwritevFull writes every buffer at off, retrying short writes, so a
// header and its page go down in one system call in the common case.
func pwritevFull(fd int, bufs [][]byte, off int64) error {
	for len(bufs) > 0 {
		n, err := unix.Pwritev(fd, bufs, off)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("pwritev at %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("pwritev at %d: %w", off, io.ErrShortWrite)
		}
		off += int64(n)
		bufs = advance(bufs, n)
	}
	return nil
}

// preadvFull fills every buffer from off; end of file is an error.
func preadvFull(fd int, bufs [][]byte, off int64) error {
	for len(bufs) > 0 {
		n, err := unix.Preadv(fd, bufs, off)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("preadv at %d: %w", off, err)
		}
		if n == 0 {
			return fmt.Errorf("preadv at %d: %w", off, io.ErrUnexpectedEOF)
		}
		off += int64(n)
		bufs = advance(bufs, n)
	}
	return nil
}

// advance drops the first n bytes from bufs.
func advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
			continue
		}
		bufs[0] = bufs[0][n:]
		n = 0
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
