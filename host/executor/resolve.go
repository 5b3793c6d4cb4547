package executor

import (
	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
)

// resolve turns a hash list into the sequence hashes of cached pages, by the
// rule host/cache also applies (host/cache/target.go): sequence hashes first;
// if the first is unknown, a path of local hashes from the tenant root; and
// when the first names a first page but the list does not resolve fully as
// sequence hashes, the reading that resolves more wins. The executor
// resolves once, up front, so that it can check a turn before changing
// anything and undo exactly what it changed; it then hands the index only
// known sequence hashes, which the index resolves the same way.
func resolve(ix *cache.Index, tenant string, hashes []uint64) (seqs []uint64, unknown int) {
	if len(hashes) == 0 {
		return nil, 0
	}
	first, ok := ix.Lookup(tenant, hashes[0])
	if !ok {
		return walkLocal(ix, tenant, hashes)
	}
	for _, h := range hashes {
		if ix.Contains(tenant, h) {
			seqs = append(seqs, h)
		} else {
			unknown++
		}
	}
	if unknown == 0 || first.Depth != 1 {
		return dedup(seqs), unknown
	}
	alt, altUnknown := walkLocal(ix, tenant, hashes)
	if altUnknown < unknown {
		return alt, altUnknown
	}
	return dedup(seqs), unknown
}

// walkLocal follows hashes as local hashes from the root, stopping at the
// first miss.
func walkLocal(ix *cache.Index, tenant string, hashes []uint64) ([]uint64, int) {
	var seqs []uint64
	var parent uint64
	for i, local := range hashes {
		seq := local // a first page's sequence hash is its local hash
		if i > 0 {
			seq = blockid.Chain(parent, local)
		}
		p, ok := ix.Lookup(tenant, seq)
		if !ok || p.Local != local || p.HasParent != (i > 0) || (i > 0 && p.Parent != parent) {
			return seqs, len(hashes) - i
		}
		seqs = append(seqs, seq)
		parent = seq
	}
	return seqs, 0
}

// resolveTokens hashes the full pages of tokens with salt and returns the
// cached prefix of them, plus how many full pages there are.
func resolveTokens(ix *cache.Index, tenant string, salt blockid.Salt, tokens []uint32) (seqs []uint64, unknown, total int) {
	h := blockid.Compute(tokens, ix.PageSize(), salt)
	for i, seq := range h.Sequence {
		if !ix.Contains(tenant, seq) {
			return seqs, len(h.Sequence) - i, len(h.Sequence)
		}
		seqs = append(seqs, seq)
	}
	return seqs, 0, len(h.Sequence)
}

func dedup(seqs []uint64) []uint64 {
	if len(seqs) < 2 {
		return seqs
	}
	seen := make(map[uint64]struct{}, len(seqs))
	out := seqs[:0]
	for _, s := range seqs {
		if _, dup := seen[s]; !dup {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}
