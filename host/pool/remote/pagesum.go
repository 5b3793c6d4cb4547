package remote

import (
	"strconv"

	"github.com/zeebo/xxh3"
)

// Sum is a page's checksum (xxh3, in hex), computed while the page is
// being sent. Hashing a page that is not in the CPU's cache reads it from
// memory as the send does; done first, it cost Redis puts about a tenth of
// their pace. Every backend writes the metadata after the page's bytes
// (a MULTI's second command, JetStream's meta message after the chunks),
// so the hash overlaps the transfer and is waited for only then.
type Sum struct {
	done chan struct{}
	v    string
}

// inlineSum is the page size below which hashing on the side costs more
// than it hides.
const inlineSum = 64 << 10

// startSum starts hashing page, which must not change until Value returns.
func startSum(page []byte) *Sum {
	s := &Sum{done: make(chan struct{})}
	if len(page) < inlineSum {
		s.v = pageSum(page)
		close(s.done)
		return s
	}
	go func() {
		s.v = pageSum(page)
		close(s.done)
	}()
	return s
}

// Value waits for the checksum.
func (s *Sum) Value() string {
	<-s.done
	return s.v
}

// String waits for the checksum too, so a client that prints its
// arguments (in an error) never reads it half made.
func (s *Sum) String() string { return s.Value() }

// MarshalBinary lets a Redis client write the checksum as a command
// argument, waiting for it only when it reaches that argument.
func (s *Sum) MarshalBinary() ([]byte, error) { return []byte(s.Value()), nil }

func pageSum(page []byte) string { return strconv.FormatUint(xxh3.Hash(page), 16) }

// copySummed copies src into dst (the same length) and returns src's
// checksum, hashed on a second goroutine beside the copy for a large page.
func copySummed(dst []byte, src string) string {
	if len(src) < inlineSum {
		copy(dst, src)
		return strconv.FormatUint(xxh3.HashString(src), 16)
	}
	sum := make(chan uint64, 1)
	go func() { sum <- xxh3.HashString(src) }()
	copy(dst, src)
	return strconv.FormatUint(<-sum, 16)
}
