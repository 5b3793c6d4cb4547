package gateway

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/chatwire"
)

// SessionHeader names a request's session.
const SessionHeader = "x-kvpilot-session"

// Sessions and how they are named:
//
//   - Named: the x-kvpilot-session header, within the request's tenant. A
//     resent history that diverges from the stored one (the harness edited,
//     forked or rewound it) stays in the session: it gets the edits the
//     rules give that history (with sticky clears, the session's clears of
//     items it still holds, matched by content, not by position), and the
//     engine's session diff splices the cache toward it.
//   - Unnamed: a stable hash of the tenant, the system message and the
//     first user message. Two conversations with the same opening collide
//     on that hash; so does a fork. A request whose history diverges from
//     the one stored under the hash moves to a child session named by the
//     hash and its first diverging message, so the two branches keep their
//     own clears and histories, and each keeps reusing its own KV (the
//     shared opening stays shared through the prefix cache). Depth is
//     bounded; past it the deepest session is reused as a named one is.
//
// A session's state changes only when its request succeeded upstream, so
// a dead upstream never loses or half-writes it; the clears are
// deterministic, so a retried request gets the same edits.

// session is one session's state.
type session struct {
	key    string
	id     string
	sticky Sticky
	// history is the hashes of the last request's messages as the client
	// sent them (before edits), to tell an extension from a divergence.
	history []uint64
	// prompt is the last request's prompt tokens, as the engine counted
	// them (its usage): what its saves cover.
	prompt int
}

// store holds sessions, least recently used forgotten first.
type store struct {
	mu  sync.Mutex
	max int
	lru *list.List
	m   map[string]*list.Element
}

func newStore(max int) *store {
	return &store{max: max, lru: list.New(), m: map[string]*list.Element{}}
}

// snapshot returns a copy of the session's state (a new one when absent).
func (s *store) snapshot(tenant, id string) session {
	key := tenant + "\x00" + id
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.m[key]
	if !ok {
		return session{key: key, id: id, sticky: Sticky{}}
	}
	cur := el.Value.(*session)
	st := make(Sticky, len(cur.sticky))
	for k, v := range cur.sticky {
		st[k] = v
	}
	return session{key: key, id: id, sticky: st, history: append([]uint64(nil), cur.history...), prompt: cur.prompt}
}

// setPrompt records the prompt tokens of the session's last request, once
// its response reported them.
func (s *store) setPrompt(key string, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		el.Value.(*session).prompt = tokens
	}
}

// save stores a session's new state (after its request succeeded).
func (s *store) save(ss session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[ss.key]; ok {
		el.Value = &ss
		s.lru.MoveToFront(el)
		return
	}
	s.m[ss.key] = s.lru.PushFront(&ss)
	for s.lru.Len() > s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.m, old.Value.(*session).key)
	}
}

// Len is how many sessions are stored.
func (s *store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// maxForkDepth bounds how many child sessions an unnamed session's
// divergences may chain through.
const maxForkDepth = 8

// resolve picks the session of a request: the named one, or the hashed
// opening and, on divergence, its child sessions.
func (s *store) resolve(tenant, named string, msgs []chat.Message) session {
	hist := historyOf(msgs)
	if named != "" {
		ss := s.snapshot(tenant, named)
		ss.history = hist
		return ss
	}
	id := openingID(tenant, msgs)
	for depth := 0; ; depth++ {
		ss := s.snapshot(tenant, id)
		d := diverges(ss.history, hist)
		if d < 0 || depth == maxForkDepth {
			ss.history = hist
			return ss
		}
		if d < len(hist) {
			id = childID(id, hist[d])
		} else { // a rewind: the request stops before the stored history does
			id = childID(id, rewindMark|uint64(len(hist)))
		}
	}
}

// diverges returns the first index where stored and next differ, or -1
// when next extends stored (or nothing is stored).
func diverges(stored, next []uint64) int {
	for i, h := range stored {
		if i >= len(next) || next[i] != h {
			return i
		}
	}
	return -1
}

// rewindMark keys the child session of a history cut short.
const rewindMark = 0xabc000

// openingID is the session name of an unnamed conversation: a hash of the
// tenant, the system message(s) and the first user message.
func openingID(tenant string, msgs []chat.Message) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	for _, m := range msgs {
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(chatwire.Text(m)))
		h.Write([]byte{0})
		if m.Role == "user" {
			break
		}
	}
	return "gw-" + hex.EncodeToString(h.Sum(nil)[:12])
}

func childID(parent string, at uint64) string {
	var b strings.Builder
	b.WriteString(parent)
	b.WriteByte('.')
	const digits = "0123456789abcdef"
	for i := 0; i < 6; i++ {
		b.WriteByte(digits[(at>>(4*i))&15])
	}
	return b.String()
}

// historyOf hashes each message as the client sent it.
func historyOf(msgs []chat.Message) []uint64 {
	out := make([]uint64, len(msgs))
	for i, m := range msgs {
		h := fnv.New64a()
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.ToolCallID))
		h.Write([]byte{0})
		h.Write([]byte(chatwire.Text(m)))
		out[i] = h.Sum64()
	}
	return out
}
