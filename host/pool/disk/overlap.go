package disk

import (
	"errors"

	"github.com/zeebo/xxh3"
)

// A page's checksum is most of the CPU a disk write costs beyond the copy
// itself, so it runs beside the write on a second goroutine instead of
// before it; a page smaller than overlapMin is hashed first.

// overlapMin is the page size from which the hash runs beside the write.
const overlapMin = splitMin

// writeHashed writes page at off while its checksum is computed, then the
// header that seal(sum) encodes after it. A crash between the two leaves
// a record whose header does not match, which readers drop as corrupt, as
// with one vectored write.
func writeHashed(fd int, page []byte, off int64, seal func(sum uint64) []byte) error {
	if len(page) < overlapMin {
		return pwritevFull(fd, [][]byte{page, seal(payloadSum(page))}, off)
	}
	sum := make(chan uint64, 1)
	go func() { sum <- payloadSum(page) }()
	err := pwritevFull(fd, [][]byte{page}, off)
	s := <-sum
	if err != nil {
		return err
	}
	return pwritevFull(fd, [][]byte{seal(s)}, off+int64(len(page)))
}

// readHashed reads a record (page, then header) at off and returns the
// page's version 2 checksum (payloadSum). A page of splitMin or more is
// read as two halves at once, each hashed by the goroutine that read it
// while it is still in that core's cache. One read followed by one hash was
// 0.78 to 0.83 of a plain read in bench tiers disk_to_host; hashing chunks
// on a second goroutine beside the reads of the next ones was slower still
// (0.62 to 0.73).
func readHashed(fd int, page, hdr []byte, off int64) (uint64, error) {
	if len(page) < splitMin {
		if err := preadvFull(fd, [][]byte{page, hdr}, off); err != nil {
			return 0, err
		}
		return payloadSum(page), nil
	}
	h := len(page) / 2
	var second uint64
	var errSecond error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if errSecond = preadvFull(fd, [][]byte{page[h:], hdr}, off+int64(h)); errSecond == nil {
			second = xxh3.Hash(page[h:])
		}
	}()
	errFirst := preadvFull(fd, [][]byte{page[:h]}, off)
	var first uint64
	if errFirst == nil {
		first = xxh3.Hash(page[:h])
	}
	<-done
	if err := errors.Join(errFirst, errSecond); err != nil {
		return 0, err
	}
	return joinHalves(first, second), nil
}
