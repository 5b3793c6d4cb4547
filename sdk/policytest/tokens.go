package policytest

import (
	"encoding/binary"
	"hash/fnv"
)

// Tokenize is the harness's stand-in tokenizer: every 4 bytes of text are
// one token whose id is their FNV-1a hash. It is deterministic and has
// about the density of a real BPE tokenizer on English and code, which is
// all policy tests need (real token ids come from the engine).
func Tokenize(s string) []uint32 {
	out := make([]uint32, 0, (len(s)+3)/4)
	for i := 0; i < len(s); i += 4 {
		h := fnv.New32a()
		h.Write([]byte(s[i:min(i+4, len(s))]))
		out = append(out, h.Sum32())
	}
	return out
}

// PageHashes chains full pages of tokens into sequence hashes, root first:
// the harness's stand-in for the host's block identity (DESIGN.md §4),
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
