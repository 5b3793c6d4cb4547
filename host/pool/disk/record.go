package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/zeebo/xxh3"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// A record is one slot of a page file: the page, then a fixed header. The
// record size is rounded up to 4 KiB and the page comes first, so every
// page starts block-aligned (copies from the page cache stay aligned, and
// O_DIRECT stays possible). A torn write leaves either the old header (a
// free slot, magic zero) or a header whose payload hash fails.
//
// Header (little endian, 512 bytes):
//
//	0   magic "KVPG"         4
//	4   version              2
//	6   flags                2   flagHasParent
//	8   layout fingerprint   8
//	16  sequence hash        8
//	24  payload length       4
//	28  namespace length     2
//	30  reserved             2
//	32  generation           8   higher wins when a key appears twice
//	40  local hash           8
//	48  parent seq hash      8   valid when flags has flagHasParent
//	56  payload checksum     8   see payloadSum
//	64  namespace           192
//	256 reserved           252
//	508 header crc32c        4   over bytes 0..508
//
// The payload is hashed with xxh3 (tens of GB/s) rather than crc32c
// (about 10 GB/s) so verifying a page costs little next to reading it.
// Version 2 hashes a large page as two halves (payloadSum) so a read can
// verify each half on the core that read it; version 1 records, one xxh3
// over the whole page, are still read.
// A free slot has a zero magic; deleting a page zeroes the magic.
const (
	headerSize    = 512
	recordAlign   = 4096
	magic         = "KVPG"
	version       = 2
	versionWhole  = 1 // the page's checksum is xxh3 of the whole page
	nsOffset      = 64
	hdrCRCOffset  = headerSize - 4
	flagHasParent = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a decoded record header.
type header struct {
	fp         layout.Fingerprint
	entry      pool.Entry
	length     uint32
	payloadSum uint64
	gen        uint64
	version    uint16
}

func (h *header) encode(b []byte) {
	clear(b[:headerSize])
	copy(b[0:4], magic)
	binary.LittleEndian.PutUint16(b[4:], version)
	if h.entry.HasParent {
		binary.LittleEndian.PutUint16(b[6:], flagHasParent)
	}
	binary.LittleEndian.PutUint64(b[8:], uint64(h.fp))
	binary.LittleEndian.PutUint64(b[16:], h.entry.Seq)
	binary.LittleEndian.PutUint32(b[24:], h.length)
	binary.LittleEndian.PutUint16(b[28:], uint16(len(h.entry.Namespace)))
	binary.LittleEndian.PutUint64(b[32:], h.gen)
	binary.LittleEndian.PutUint64(b[40:], h.entry.Local)
	binary.LittleEndian.PutUint64(b[48:], h.entry.Parent)
	binary.LittleEndian.PutUint64(b[56:], h.payloadSum)
	copy(b[nsOffset:], h.entry.Namespace)
	binary.LittleEndian.PutUint32(b[hdrCRCOffset:], crc32.Checksum(b[:hdrCRCOffset], castagnoli))
}

// errFree marks a slot that holds no record (zero magic).
var errFree = errors.New("free slot")

// decode parses a header. It returns errFree for an empty slot and a
// descriptive error for anything else that is not a valid header.
func (h *header) decode(b []byte) error {
	if string(b[0:4]) != magic {
		if binary.LittleEndian.Uint32(b[0:4]) == 0 {
			return errFree
		}
		return fmt.Errorf("bad magic %x", b[0:4])
	}
	if got, want := crc32.Checksum(b[:hdrCRCOffset], castagnoli), binary.LittleEndian.Uint32(b[hdrCRCOffset:]); got != want {
		return fmt.Errorf("header checksum %08x, stored %08x", got, want)
	}
	h.version = binary.LittleEndian.Uint16(b[4:])
	if h.version != version && h.version != versionWhole {
		return fmt.Errorf("record version %d, this build reads %d and %d", h.version, versionWhole, version)
	}
	nsLen := int(binary.LittleEndian.Uint16(b[28:]))
	if nsLen > pool.MaxNamespace {
		return fmt.Errorf("namespace length %d", nsLen)
	}
	h.fp = layout.Fingerprint(binary.LittleEndian.Uint64(b[8:]))
	h.entry = pool.Entry{
		Key:       pool.Key{Seq: binary.LittleEndian.Uint64(b[16:]), Namespace: string(b[nsOffset : nsOffset+nsLen])},
		Local:     binary.LittleEndian.Uint64(b[40:]),
		Parent:    binary.LittleEndian.Uint64(b[48:]),
		HasParent: binary.LittleEndian.Uint16(b[6:])&flagHasParent != 0,
	}
	h.length = binary.LittleEndian.Uint32(b[24:])
	h.payloadSum = binary.LittleEndian.Uint64(b[56:])
	h.gen = binary.LittleEndian.Uint64(b[32:])
	return nil
}

// splitMin is the page size from which a version 2 checksum covers the
// page as two halves.
const splitMin = 512 << 10

// payloadSum is the page checksum a version 2 header stores: for a page of
// splitMin or more, xxh3 over the xxh3 of each half (joinHalves); below it,
// xxh3 of the page.
func payloadSum(page []byte) uint64 {
	if len(page) < splitMin {
		return xxh3.Hash(page)
	}
	h := len(page) / 2
	return joinHalves(xxh3.Hash(page[:h]), xxh3.Hash(page[h:]))
}

// joinHalves is a split page's checksum from its halves' hashes.
func joinHalves(first, second uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], first)
	binary.LittleEndian.PutUint64(b[8:], second)
	return xxh3.Hash(b[:])
}

// sumFor is the checksum a header of version v stores for page.
func sumFor(v uint16, page []byte) uint64 {
	if v == versionWhole {
		return xxh3.Hash(page)
	}
	return payloadSum(page)
}

// FileBytes is the size of the page file a disk tier of pages pages of
// pageBytes bytes keeps: what it may take on its filesystem once full.
func FileBytes(pageBytes, pages int) int64 { return recordSize(pageBytes) * int64(pages) }

func recordSize(pageBytes int) int64 {
	n := int64(headerSize + pageBytes)
	return (n + recordAlign - 1) / recordAlign * recordAlign
}
