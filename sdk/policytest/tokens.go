package policytest

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/kvpilot/kvpilot/sdk/chunktok"
)

// Tokenize is the harness's stand-in tokenizer (sdk/chunktok): every 4
// bytes of text are one token whose id is their FNV-1a hash. Real token ids
// come from the engine; this is all policy tests need.
func Tokenize(s string) []uint32 { return chunktok.Tokenize(s) }

// PageHashes chains full pages of tokens into sequence hashes, root first:
// the harness's stand-in for the host's block identity,
// which sdk may not import. Equal prefixes give equal hashes, which is the
// property policies rely on.
func PageHashes(tokens []uint32, pageSize int) []uint64 {
	if pageSize <= 0 {
		return nil
	}
	n := len(tokens) / pageSize
	out := make([]uint64, n)
	var prev uint64
	buf := make([]byte, 8+4*pageSize)
	for p := 0; p < n; p++ {
		binary.LittleEndian.PutUint64(buf, prev)
		for i, t := range tokens[p*pageSize : (p+1)*pageSize] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], t)
		}
		h := fnv.New64a()
		h.Write(buf)
		prev = h.Sum64()
		out[p] = prev
	}
	return out
}
