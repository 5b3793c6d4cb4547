package cache

import (
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/tier"
)

// Page is what a match or lookup reports about one cached page.
type Page struct {
	Seq   uint64
	Local uint64
	// Tiers holds the tiers the page is resident on; Loc[t] is its location
	// on tier t (meaningful only where Tiers.Has(t)).
	Tiers TierSet
	Loc   [tier.Count]uint64
}

// MatchResult receives a match. Reuse one across calls: its slices are
// truncated and refilled, so a steady-state match allocates nothing.
type MatchResult struct {
	// Pages is the longest cached prefix, page-aligned, root first.
	Pages []Page
	// Hashes holds the hashes of every full page of the request (matched or
	// not); pass them to Commit so the prompt is hashed once.
	Hashes blockid.Hashes
}

// Tokens returns how many tokens the match covers.
func (m *MatchResult) Tokens(pageSize int) int { return len(m.Pages) * pageSize }

// Match finds the longest cached prefix of tokens for tenant. Only full
// pages match, so a trailing partial page never does. Every matched page's
// last access is set to now and its pin, when live, is refreshed to
// now + pin_ttl (refresh on hit). Pages whose pin has lapsed lose it here.
func (ix *Index) Match(tenant string, salt blockid.Salt, tokens []uint32, m *MatchResult) {
	m.Hashes.Local = m.Hashes.Local[:0]
	m.Hashes.Sequence = m.Hashes.Sequence[:0]
	m.Hashes = blockid.AppendCompute(m.Hashes, tokens, ix.cfg.PageSize, salt)
	ix.match(tenant, m)
}

// MatchHashes is Match for hashes already computed (h.Local and
// h.Sequence of consecutive pages from the tenant root). It copies h into
// m.Hashes, so h is not retained.
func (ix *Index) MatchHashes(tenant string, h blockid.Hashes, m *MatchResult) {
	m.Hashes.Local = append(m.Hashes.Local[:0], h.Local...)
	m.Hashes.Sequence = append(m.Hashes.Sequence[:0], h.Sequence...)
	ix.match(tenant, m)
}

func (ix *Index) match(tenant string, m *MatchResult) {
	h := m.Hashes
	m.Pages = m.Pages[:0]
	ts := ix.tenant(tenant)
	if ts == nil {
		return
	}
	now := ix.clock.Now()
	parent := &ts.root
	n := min(len(h.Local), len(h.Sequence))
	for i := 0; i < n; i++ {
		c := ts.bySeq[h.Sequence[i]]
		if c == nil || c.parent != parent || c.local != h.Local[i] {
			break
		}
		ix.touch(c, now)
		m.Pages = append(m.Pages, Page{Seq: c.seq, Local: c.local, Tiers: c.resident, Loc: c.loc})
		parent = c
	}
	ix.afterMutation()
}

// touch records a hit on n: last access, and refresh-on-hit of a live pin.
func (ix *Index) touch(n *node, now time.Duration) {
	n.lastAccess = now
	if n.pinCount == 0 {
		return
	}
	if now >= n.r().pinExpiry {
		ix.clearPin(n) // lazy expiry
		return
	}
	if e := now + n.r().pinTTL; e > n.r().pinExpiry {
		n.w().pinExpiry = e
	}
}

// PageInfo is the full record of one page, for the control plane and tests.
type PageInfo struct {
	Page
	Tenant       string
	Parent       uint64
	HasParent    bool
	Depth        int // 1 for a first page
	Children     int
	LockRef      int
	PinCount     int
	PinTTL       time.Duration
	PinExpiry    time.Duration
	Priority     int
	RetainExpiry time.Duration
	Transient    bool
	Lease        string // the most recent live lease holding the page
	Leases       int
	LastAccess   time.Duration
	InFlight     int
}

// Lookup returns the page with sequence hash seq in tenant, without
// touching it.
func (ix *Index) Lookup(tenant string, seq uint64) (PageInfo, bool) {
	ts := ix.tenant(tenant)
	if ts == nil {
		return PageInfo{}, false
	}
	n := ts.bySeq[seq]
	if n == nil {
		return PageInfo{}, false
	}
	return n.info(), true
}

// Contains reports whether tenant has a page with sequence hash seq.
func (ix *Index) Contains(tenant string, seq uint64) bool {
	ts := ix.tenant(tenant)
	return ts != nil && ts.bySeq[seq] != nil
}

func (n *node) info() PageInfo {
	pi := PageInfo{
		Page:         Page{Seq: n.seq, Local: n.local, Tiers: n.resident, Loc: n.loc},
		Tenant:       n.tenant.name,
		Depth:        int(n.depth),
		Children:     int(n.nchildren),
		LockRef:      int(n.lockRef),
		PinCount:     int(n.pinCount),
		PinTTL:       n.r().pinTTL,
		PinExpiry:    n.r().pinExpiry,
		Priority:     int(n.priority),
		RetainExpiry: n.r().retainExpiry,
		Transient:    n.transient,
		Leases:       int(n.r().leaseRefs),
		LastAccess:   n.lastAccess,
		InFlight:     int(n.pending),
	}
	pi.Parent, pi.HasParent = n.parentSeq()
	if n.r().lease != nil && n.r().leaseRefs > 0 {
		pi.Lease = n.r().lease.id
	}
	return pi
}
