package engine

import (
	"container/list"
	"slices"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

// Session is what the host remembers of a session: its latest cached token
// sequence (what a splice's span indexes) and the chat messages
// of its latest request.
type Session struct {
	ID     string
	Tenant string
	// Tokens is the sequence of the session's latest commit (or splice);
	// CachedTokens of them (full pages) were committed to the cache.
	Tokens       []uint32
	CachedTokens int
	Messages     []chat.Message
	Requests     int
	Updated      time.Time
	// Edited are the ranges of Tokens a splice replaced (in the current
	// positions), so observations can tell policies which messages the
	// host already edited.
	Edited []Span
}

// Span is a token range [Start, End).
type Span struct{ Start, End int }

// maxEditedSpans bounds the edit ranges remembered per session; the oldest
// are forgotten first.
const maxEditedSpans = 256

// sessionState is a session with what splicing needs fast: the sequence
// hashes of its cached pages, so Leaves and Through need no rehashing.
type sessionState struct {
	Session
	hashes []uint64
	// weight is the bytes this session holds, as last counted (reweigh).
	weight int64
}

// size is roughly the bytes a session holds: its tokens, page hashes and
// message texts.
func (s *sessionState) size() int64 {
	n := int64(4*cap(s.Tokens) + 8*cap(s.hashes) + 16*cap(s.Edited) + len(s.ID) + 128)
	for _, m := range s.Messages {
		n += int64(len(m.Role)+len(m.ToolName)+len(m.Content)+len(m.ThinkingText)+16*len(m.Thinking)) + 64
	}
	return n
}

// sessions is an LRU map of sessions, bounded so a flood of one-shot
// sessions cannot grow the host without limit, with a per-namespace index
// for the splicer's Leaves and Through: sessions of tenants that share a
// cache namespace share pages, so a splice must see all of them.
type sessions struct {
	max      int
	pageSize int
	// maxBytes bounds the bytes the sessions hold together (0: no bound):
	// a count bound alone lets long sessions grow the host by gigabytes.
	maxBytes, bytes int64
	byID            map[string]*list.Element
	byNamespace     map[string]map[string]*sessionState
	lru             *list.List // front: most recent
	// namespace maps a tenant to its cache namespace (the index's); nil:
	// the tenant is the namespace.
	namespace func(tenant string) string
}

func newSessions(max, pageSize int, namespace func(string) string) *sessions {
	return &sessions{max: max, pageSize: pageSize, namespace: namespace, byID: map[string]*list.Element{},
		byNamespace: map[string]map[string]*sessionState{}, lru: list.New()}
}

// nsOf is tenant's key in byNamespace.
func (ss *sessions) nsOf(tenant string) string {
	if ss.namespace == nil {
		return tenant
	}
	return ss.namespace(tenant)
}

// inNamespace returns the sessions of tenant's namespace.
func (ss *sessions) inNamespace(tenant string) map[string]*sessionState {
	return ss.byNamespace[ss.nsOf(tenant)]
}

func (ss *sessions) get(id string, create bool) *sessionState {
	if e, ok := ss.byID[id]; ok {
		ss.lru.MoveToFront(e)
		return e.Value.(*sessionState)
	}
	if !create {
		return nil
	}
	s := &sessionState{Session: Session{ID: id}}
	ss.byID[id] = ss.lru.PushFront(s)
	ss.setTenant(s, "")
	ss.trim(s)
	return s
}

// reweigh recounts s's bytes after a change and forgets the least
// recently used sessions past the bounds.
func (ss *sessions) reweigh(s *sessionState) {
	w := s.size()
	ss.bytes += w - s.weight
	s.weight = w
	ss.trim(s)
}

// trim forgets the least recently used sessions while there are more
// than max or they hold more than maxBytes, never keep (the session being
// updated, at the front).
func (ss *sessions) trim(keep *sessionState) {
	for ss.lru.Len() > ss.max || (ss.maxBytes > 0 && ss.bytes > ss.maxBytes && ss.lru.Len() > 1) {
		old := ss.lru.Back()
		o := old.Value.(*sessionState)
		if o == keep {
			return
		}
		ss.lru.Remove(old)
		delete(ss.byID, o.ID)
		ss.dropTenant(o)
		ss.bytes -= o.weight
	}
}

// setTenant moves s to tenant's namespace index.
func (ss *sessions) setTenant(s *sessionState, tenant string) {
	if m := ss.inNamespace(s.Tenant); m != nil && m[s.ID] == s && s.Tenant == tenant {
		return
	}
	ss.dropTenant(s)
	s.Tenant = tenant
	ns := ss.nsOf(tenant)
	m := ss.byNamespace[ns]
	if m == nil {
		m = map[string]*sessionState{}
		ss.byNamespace[ns] = m
	}
	m[s.ID] = s
}

func (ss *sessions) dropTenant(s *sessionState) {
	ns := ss.nsOf(s.Tenant)
	if m := ss.byNamespace[ns]; m != nil && m[s.ID] == s {
		delete(m, s.ID)
		if len(m) == 0 {
			delete(ss.byNamespace, ns)
		}
	}
}

// touch records a request of the session (Match) and returns its turn
// (the request count before it) and the messages of its previous request.
func (ss *sessions) touch(id, tenant string, msgs []chat.Message) (turn int, prev []chat.Message) {
	if id == "" {
		return 0, nil
	}
	s := ss.get(id, true)
	ss.setTenant(s, tenant)
	turn, prev = s.Requests, s.Messages
	s.Requests++
	s.Updated = time.Now()
	if len(msgs) > 0 {
		s.Messages = msgs
		ss.reweigh(s)
	}
	return turn, prev
}

// commit records the session's latest cached sequence: toks, of which
// cached tokens are in the full pages whose sequence hashes are hashes.
func (ss *sessions) commit(id, tenant string, toks []uint32, cached int, hashes []uint64) {
	if id == "" {
		return
	}
	s := ss.get(id, true)
	ss.setTenant(s, tenant)
	// Edits beyond where the new sequence leaves the old one no longer
	// describe it (the engine sent another history).
	keep := splice.CommonPrefix(s.Tokens, toks)
	s.Edited = slices.DeleteFunc(s.Edited, func(e Span) bool { return e.End > keep })
	s.Tokens = append(s.Tokens[:0], toks...)
	s.CachedTokens = cached
	s.hashes = append(s.hashes[:0], hashes...)
	s.Updated = time.Now()
	ss.reweigh(s)
}

// splice records a splice's result: toks replaces the sequence, cached of
// it is in committed pages. The edited range is derived from the old and
// new sequences (their common prefix and suffix), and earlier edit ranges
// are moved to the new positions.
func (ss *sessions) splice(id, tenant string, toks []uint32, cached int, salt blockid.Salt) {
	s := ss.get(id, true)
	ss.setTenant(s, tenant)
	old := s.Tokens
	if p := splice.CommonPrefix(old, toks); p < len(old) || p < len(toks) {
		sfx := splice.CommonSuffix(old[p:], toks[p:])
		oldEnd, newEnd := len(old)-sfx, len(toks)-sfx
		delta := newEnd - oldEnd
		merged := Span{Start: p, End: newEnd}
		out := s.Edited[:0]
		for _, e := range s.Edited {
			switch {
			case e.End <= p:
				out = append(out, e)
			case e.Start >= oldEnd:
				out = append(out, Span{e.Start + delta, e.End + delta})
			default: // overlaps the edit: one range covers both
				merged.Start = min(merged.Start, e.Start)
				merged.End = max(merged.End, e.End+delta)
			}
		}
		out = append(out, merged)
		slices.SortFunc(out, func(a, b Span) int { return a.Start - b.Start })
		if len(out) > maxEditedSpans {
			out = out[len(out)-maxEditedSpans:]
		}
		s.Edited = out
	}
	s.Tokens = append([]uint32(nil), toks...) // old may be a caller's copy
	s.CachedTokens = cached
	full := min(cached, len(toks)) / ss.pageSize * ss.pageSize
	s.hashes = blockid.Compute(toks[:full], ss.pageSize, salt).Sequence
	s.Updated = time.Now()
	ss.reweigh(s)
}

// markEdited sets Edited on the messages whose span overlaps an edit of
// the session (an empty edit, a deletion, counts as its position).
func markEdited(msgs []chat.Message, edited []Span) {
	for i := range msgs {
		m := &msgs[i]
		for _, e := range edited {
			end := int64(max(e.End, e.Start+1))
			if int64(e.Start) < m.Span.End && m.Span.Start < end {
				m.Edited = true
				break
			}
		}
	}
}

// SessionCount is how many sessions the host remembers (within the
// engine.max_sessions bound): of tenant, or of every tenant when all.
func (s *Service) SessionCount(tenant string, all bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if all {
		return s.sessions.lru.Len()
	}
	n := 0
	for _, e := range s.sessions.byID {
		if e.Value.(*sessionState).Tenant == tenant {
			n++
		}
	}
	return n
}

// Session returns a copy of what the host remembers of session id.
func (s *Service) Session(id string) (Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions.get(id, false)
	if ss == nil {
		return Session{}, false
	}
	out := ss.Session
	out.Tokens = slices.Clone(ss.Tokens)
	out.Messages = slices.Clone(ss.Messages)
	out.Edited = slices.Clone(ss.Edited)
	return out, true
}

// SetSessionTokens replaces a session's cached sequence: what a splice does
// after it edited the session's cache (tokens is the new sequence, cached
// how many of its tokens are in full committed pages).
func (s *Service) SetSessionTokens(id, tenant string, tokens []uint32, cached int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions.splice(id, tenant, tokens, cached, blockid.Salt{Namespace: s.sessions.nsOf(tenant)})
}
