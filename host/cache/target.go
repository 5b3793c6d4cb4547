package cache

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/blockid"
)

// Target names the pages a directive acts on, in one of two ways:
//
//   - Tokens (when non-nil): the cached full-page prefix of these tokens,
//     hashed with Salt;
//   - Hashes: resolved by the block identity rule. If the first hash is a known
//     sequence hash, every hash is looked up as a sequence hash; otherwise
//     the list is walked as a path of local hashes from the tenant root,
//     stopping at the first miss. Because a first page's sequence hash
//     equals its local hash, a list whose first hash names a first page
//     and that does not resolve fully as sequence hashes is also walked as
//     a path, and the reading that resolves more pages wins.
//
// Hashes that name no page are counted as unknown and affect nothing.
type Target struct {
	Tenant string
	Hashes []uint64
	Tokens []uint32
	Salt   blockid.Salt
}

// TargetHashes is a Target of hashes.
func TargetHashes(tenant string, hashes ...uint64) Target {
	return Target{Tenant: tenant, Hashes: hashes}
}

// TargetTokens is a Target of a token prefix.
func TargetTokens(tenant string, salt blockid.Salt, tokens []uint32) Target {
	return Target{Tenant: tenant, Tokens: tokens, Salt: salt}
}

func (t Target) String() string {
	if t.Tokens != nil {
		return fmt.Sprintf("tenant %q, %d tokens", t.Tenant, len(t.Tokens))
	}
	switch len(t.Hashes) {
	case 0:
		return fmt.Sprintf("tenant %q, no hashes", t.Tenant)
	case 1:
		return fmt.Sprintf("tenant %q, block %d", t.Tenant, t.Hashes[0])
	}
	return fmt.Sprintf("tenant %q, %d blocks from %d", t.Tenant, len(t.Hashes), t.Hashes[0])
}

// resolve fills ix.nodes with the target's pages (duplicates possible for
// hash lists) and returns how many requested pages are unknown. The slice
// is scratch: valid until the next resolve.
func (ix *Index) resolve(t Target) (nodes []*node, unknown int) {
	nodes = ix.nodes[:0]
	defer func() { ix.nodes = nodes[:0] }()
	ts := ix.tenant(t.Tenant)
	if t.Tokens != nil {
		ix.hashes.Local = ix.hashes.Local[:0]
		ix.hashes.Sequence = ix.hashes.Sequence[:0]
		ix.hashes = blockid.AppendCompute(ix.hashes, t.Tokens, ix.cfg.PageSize, t.Salt)
		if ts == nil {
			return nodes, len(ix.hashes.Local)
		}
		parent := &ts.root
		for i, seq := range ix.hashes.Sequence {
			c := ts.bySeq[seq]
			if c == nil || c.parent != parent || c.local != ix.hashes.Local[i] {
				return nodes, len(ix.hashes.Local) - i
			}
			nodes = append(nodes, c)
			parent = c
		}
		return nodes, 0
	}
	if ts == nil || len(t.Hashes) == 0 {
		return nodes, len(t.Hashes)
	}
	if first := ts.bySeq[t.Hashes[0]]; first != nil {
		for _, h := range t.Hashes {
			if c := ts.bySeq[h]; c != nil {
				nodes = append(nodes, c)
			} else {
				unknown++
			}
		}
		// A first page's sequence hash equals its local hash, so a local
		// path from the root always starts with a known sequence hash. When
		// the list does not resolve fully as sequence hashes, walk it as a
		// path too and keep whichever resolves more.
		if unknown == 0 || first.depth != 1 {
			return nodes, unknown
		}
		alt, altUnknown := walkLocal(ts, t.Hashes, ix.alt[:0])
		ix.alt = alt[:0]
		if altUnknown < unknown {
			nodes = append(nodes[:0], alt...)
			unknown = altUnknown
		}
		return nodes, unknown
	}
	nodes, unknown = walkLocal(ts, t.Hashes, nodes)
	return nodes, unknown
}

// walkLocal resolves hashes as a path of local hashes from the tenant
// root, stopping at the first miss.
func walkLocal(ts *tenantState, hashes []uint64, nodes []*node) ([]*node, int) {
	parent := &ts.root
	for i, local := range hashes {
		c := ts.bySeq[parent.chainSeq(local)]
		if c == nil || c.parent != parent || c.local != local {
			return nodes, len(hashes) - i
		}
		nodes = append(nodes, c)
		parent = c
	}
	return nodes, 0
}

// closureOf returns the pages in nodes plus all their ancestors, each once,
// every ancestor before its descendants. The slice is scratch (ix.closure).
func (ix *Index) closureOf(nodes []*node) []*node {
	epoch := ix.nextEpoch()
	out := ix.closure[:0]
	for _, n := range nodes {
		start := len(out)
		for c := n; !c.isRoot && c.mark != epoch; c = c.parent {
			c.mark = epoch
			out = append(out, c)
		}
		// The walk appended leaf-first; reverse so ancestors come first.
		for i, j := start, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	ix.closure = out
	return out
}

// dedup removes repeated nodes from nodes in place, keeping first
// occurrences.
func (ix *Index) dedup(nodes []*node) []*node {
	epoch := ix.nextEpoch()
	out := nodes[:0]
	for _, n := range nodes {
		if n.mark != epoch {
			n.mark = epoch
			out = append(out, n)
		}
	}
	return out
}

func unknownErr(op string, t Target, unknown int) error {
	return fmt.Errorf("%s %s: none of the %d requested blocks is cached: %w", op, t, unknown, ErrUnknownBlock)
}
