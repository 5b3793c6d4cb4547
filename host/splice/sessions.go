package splice

import (
	"slices"
	"sync"

	"github.com/kvpilot/kvpilot/host/blockid"
)

// Session is what a splice needs of a session: its tenant and its current
// token sequence, Cached tokens of which sit in committed full pages.
type Session struct {
	ID     string
	Tenant string
	Tokens []uint32
	Cached int
}

// Sessions resolves session ids to their cached sequences. The engine
// service implements it (it records each session's latest commit); the
// splicer never calls it with the index lock held, so an implementation
// may take its own lock and then the index lock, never the reverse.
type Sessions interface {
	// Session returns a copy of the session.
	Session(id string) (Session, bool)
	// SetSession records the session's sequence after a splice: Tokens is
	// the edited sequence, Cached how many of its tokens are cached now
	// (it grows again when the replacement fills are committed).
	SetSession(s Session)
	// Leaves returns the sequence hash of the last cached page of every
	// session of tenant except the one named: a splice never edits in
	// place or releases a page on another session's path. Sessions without
	// a cached page are left out. LeafOf computes one.
	Leaves(tenant, except string) []uint64
	// Through returns the sessions of tenant whose cached path contains
	// the page seq (a Think purge of an interior page splices each of
	// them). PathContains tests one.
	Through(tenant string, seq uint64) []Session
}

// LeafOf is the sequence hash of the last full page among the first cached
// tokens, and false when there is none.
func LeafOf(tokens []uint32, cached, pageSize int, salt blockid.Salt) (uint64, bool) {
	cached = min(cached, len(tokens))
	if cached < pageSize {
		return 0, false
	}
	h := blockid.Compute(tokens[:cached-cached%pageSize], pageSize, salt)
	return h.Sequence[len(h.Sequence)-1], true
}

// PathContains reports whether seq is one of the full pages among the
// first cached tokens.
func PathContains(tokens []uint32, cached, pageSize int, salt blockid.Salt, seq uint64) bool {
	cached = min(cached, len(tokens))
	h := blockid.Compute(tokens[:cached-cached%pageSize], pageSize, salt)
	return slices.Contains(h.Sequence, seq)
}

// MemorySessions is an in-memory Sessions for tests and tools: sessions
// are put with Put and updated by splices.
type MemorySessions struct {
	PageSize int
	Salt     func(tenant string) blockid.Salt

	mu   sync.Mutex
	byID map[string]Session
}

// NewMemorySessions returns an empty store hashing with pageSize and salt
// (nil: the tenant is the namespace).
func NewMemorySessions(pageSize int, salt func(string) blockid.Salt) *MemorySessions {
	if salt == nil {
		salt = defaultSalt
	}
	return &MemorySessions{PageSize: pageSize, Salt: salt, byID: map[string]Session{}}
}

func defaultSalt(tenant string) blockid.Salt { return blockid.Salt{Namespace: tenant} }

// Put records a session (a copy of s).
func (m *MemorySessions) Put(s Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.Tokens = slices.Clone(s.Tokens)
	m.byID[s.ID] = s
}

// Session implements Sessions.
func (m *MemorySessions) Session(id string) (Session, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	s.Tokens = slices.Clone(s.Tokens)
	return s, ok
}

// SetSession implements Sessions.
func (m *MemorySessions) SetSession(s Session) { m.Put(s) }

// Leaves implements Sessions.
func (m *MemorySessions) Leaves(tenant, except string) []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []uint64
	for _, id := range m.sortedIDs() {
		s := m.byID[id]
		if m.Salt(s.Tenant) != m.Salt(tenant) || s.ID == except { // another namespace
			continue
		}
		if leaf, ok := LeafOf(s.Tokens, s.Cached, m.PageSize, m.Salt(tenant)); ok {
			out = append(out, leaf)
		}
	}
	return out
}

// Through implements Sessions.
func (m *MemorySessions) Through(tenant string, seq uint64) []Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Session
	for _, id := range m.sortedIDs() {
		s := m.byID[id]
		if m.Salt(s.Tenant) == m.Salt(tenant) && PathContains(s.Tokens, s.Cached, m.PageSize, m.Salt(tenant), seq) {
			s.Tokens = slices.Clone(s.Tokens)
			out = append(out, s)
		}
	}
	return out
}

// sortedIDs keeps results deterministic. Caller holds mu.
func (m *MemorySessions) sortedIDs() []string {
	ids := make([]string, 0, len(m.byID))
	for id := range m.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
