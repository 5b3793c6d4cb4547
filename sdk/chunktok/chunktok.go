// Package chunktok is the stand-in tokenizer of kvpilot's reference engine,
// tests and benchmarks: every 4 bytes of text are one token whose id is
// their FNV-1a hash. It is deterministic and about as dense as a real BPE
// tokenizer on English and code. Real deployments tokenize in the engine;
// a host configured with `engine.tokenizer: chunk4` uses this one to turn
// text splice replacements into tokens the reference engine agrees with.
package chunktok

import "hash/fnv"

// Name is the config value that selects this tokenizer.
const Name = "chunk4"

// Tokenize splits s into 4-byte chunks and hashes each.
func Tokenize(s string) []uint32 {
	out := make([]uint32, 0, (len(s)+3)/4)
	for i := 0; i < len(s); i += 4 {
		h := fnv.New32a()
		h.Write([]byte(s[i:min(i+4, len(s))]))
		out = append(out, h.Sum32())
	}
	return out
}
