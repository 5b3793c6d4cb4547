// Package blockid computes the block identities that Dynamo routers and
// kvpilot agree on.
//
// Only full pages are hashed. A page's local hash is xxh3-64 of its tokens as
// little-endian u32 bytes with a salted seed; its sequence hash chains the
// parent's sequence hash with its own local hash, so it names the whole
// prefix up to and including the page.
package blockid

import (
	"encoding/binary"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// BaseSeed is the seed every hash starts from.
const BaseSeed uint64 = 1337

// Salt carries what separates otherwise identical token pages: the LoRA
// adapter and the cache namespace (the tenant, by default). Empty strings
// count as absent.
type Salt struct {
	LoRA      string
	Namespace string
}

// Seed returns the seed for local hashes under this salt: 1337, plus
// xxh3(lora, 0) when a LoRA is set, plus xxh3(namespace, 1) when a namespace
// is set, all with wrapping addition.
func (s Salt) Seed() uint64 {
	seed := BaseSeed
	if s.LoRA != "" {
		seed += xxh3.HashStringSeed(s.LoRA, 0)
	}
	if s.Namespace != "" {
		seed += xxh3.HashStringSeed(s.Namespace, 1)
	}
	return seed
}

// Local hashes one page of tokens with the given seed.
func Local(page []uint32, seed uint64) uint64 {
	if littleEndian {
		// The in-memory bytes of a []uint32 already are the little-endian
		// encoding the contract hashes: hash them in place, no copy.
		if len(page) == 0 {
			return xxh3.HashSeed(nil, seed)
		}
		return xxh3.HashSeed(unsafe.Slice((*byte)(unsafe.Pointer(&page[0])), 4*len(page)), seed)
	}
	var stack [256]byte
	buf := stack[:0]
	if n := 4 * len(page); n > len(stack) {
		buf = make([]byte, 0, n)
	}
	for _, t := range page {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	return xxh3.HashSeed(buf, seed)
}

// littleEndian reports whether this machine stores a uint32 in
// little-endian byte order.
var littleEndian = func() bool {
	x := uint32(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Chain returns the sequence hash of a page whose parent has sequence hash
// parent and whose own local hash is local.
func Chain(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], BaseSeed)
}

// Hashes holds the local and sequence hashes of a token sequence's full pages.
type Hashes struct {
	Local    []uint64 `json:"local"`
	Sequence []uint64 `json:"sequence"`
}

// Compute hashes every full page of tokens; a trailing partial page is
// ignored. pageSize must be positive.
func Compute(tokens []uint32, pageSize int, salt Salt) Hashes {
	return AppendCompute(Hashes{}, tokens, pageSize, salt)
}

// AppendCompute is Compute appending into h's slices, so hot paths can reuse
// their buffers.
func AppendCompute(h Hashes, tokens []uint32, pageSize int, salt Salt) Hashes {
	if pageSize <= 0 {
		return h
	}
	seed := salt.Seed()
	n := len(tokens) / pageSize
	var parent uint64
	for i := 0; i < n; i++ {
		l := Local(tokens[i*pageSize:(i+1)*pageSize], seed)
		s := l
		if i > 0 {
			s = Chain(parent, l)
		}
		h.Local = append(h.Local, l)
		h.Sequence = append(h.Sequence, s)
		parent = s
	}
	return h
}

// FromSigned bit-casts a signed hash, as some clients send them, to the
// unsigned form used everywhere inside kvpilot.
func FromSigned(v int64) uint64 { return uint64(v) }
