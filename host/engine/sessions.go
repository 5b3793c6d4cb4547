package engine

import (
	"container/list"
	"time"
)

// Session is what the host remembers of a session: its latest cached token
// sequence (what a splice's span indexes, DESIGN §6) and the chat messages
// of its latest request.
type Session struct {
	ID     string
	Tenant string
	// Tokens is the sequence of the session's latest commit; CachedTokens
	// of them (full pages) were committed to the cache.
	Tokens       []uint32
	CachedTokens int
	Messages     []Message
	Requests     int
	Updated      time.Time
}

// sessions is an LRU map of sessions, bounded so a flood of one-shot
// sessions cannot grow the host without limit.
type sessions struct {
	max  int
	byID map[string]*list.Element
	lru  *list.List // front: most recent
}

func newSessions(max int) *sessions {
	return &sessions{max: max, byID: map[string]*list.Element{}, lru: list.New()}
}

func (ss *sessions) get(id string, create bool) *Session {
	if e, ok := ss.byID[id]; ok {
		ss.lru.MoveToFront(e)
		return e.Value.(*Session)
	}
	if !create {
		return nil
	}
	s := &Session{ID: id}
	ss.byID[id] = ss.lru.PushFront(s)
	for ss.lru.Len() > ss.max {
		old := ss.lru.Back()
		ss.lru.Remove(old)
		delete(ss.byID, old.Value.(*Session).ID)
	}
	return s
}

// touch records a request of the session (Match).
func (ss *sessions) touch(id, tenant string, msgs []Message) {
	if id == "" {
		return
	}
	s := ss.get(id, true)
	s.Tenant = tenant
	s.Requests++
	s.Updated = time.Now()
	if len(msgs) > 0 {
		s.Messages = msgs
	}
}

// commit records the session's latest cached sequence.
func (ss *sessions) commit(id, tenant string, toks []uint32, cached int) {
	if id == "" {
		return
	}
	s := ss.get(id, true)
	s.Tenant = tenant
	s.Tokens = append(s.Tokens[:0], toks...)
	s.CachedTokens = cached
	s.Updated = time.Now()
}

// Session returns a copy of what the host remembers of session id.
func (s *Service) Session(id string) (Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions.get(id, false)
	if ss == nil {
		return Session{}, false
	}
	out := *ss
	out.Tokens = append([]uint32(nil), ss.Tokens...)
	out.Messages = append([]Message(nil), ss.Messages...)
	return out, true
}

// SetSessionTokens replaces a session's cached sequence: what a splice does
// after it edited the session's cache (tokens is the new sequence, cached
// how many of its tokens are in full committed pages).
func (s *Service) SetSessionTokens(id, tenant string, tokens []uint32, cached int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions.commit(id, tenant, tokens, cached)
}
