package engine

import (
	"sort"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/errmap"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// request is one engine request between Match and Release/Finish. What it
// holds on the host: one lock on the deepest page it reads or wrote (which
// locks the whole path), and the device slots it was allocated and has not
// committed.
type request struct {
	mu       sync.Mutex // serializes the request's own calls
	id       string
	reg      *registration
	session  string
	tenant   string
	salt     blockid.Salt
	prompt   []uint32
	messages []Message
	// locked is the deepest page holding the request's lock.
	locked    uint64
	hasLock   bool
	owned     map[pool.Slot]struct{}
	committed []uint32 // tokens of the full pages committed (or matched)
	hashes    []uint64 // sequence hashes of those pages
	matched   int      // pages matched
	turn      int      // the session's request count before this one
	touched   time.Time
	done      bool
}

// Message is a chat message with its token span, as the engine sent it.
// Start and End index the request's tokens, which are the session's cached
// sequence when the engine sent the prompt with the host's edits applied.
type Message struct {
	Role, ToolName, Content string
	Start, End              int
	Thinking                [][2]int
	ThinkingText            string
	// Edited: a splice already replaced part of the message's span (the
	// host's record of the session's edits; see Session.Edited).
	Edited bool
}

// requestOf finds a live request of the live registration.
func (s *Service) requestOf(regID, reqID string) (*request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, err := s.registrationOf(regID)
	if err != nil {
		return nil, err
	}
	r := s.requests[reqID]
	if r == nil || r.reg != reg {
		if reqID == "" {
			return nil, errcode.New(errcode.MissingField, "request_id")
		}
		return nil, errcode.New(errcode.UnknownRequest, "request %.64q (it ended, was never matched, or was released when idle)", reqID)
	}
	return r, nil
}

// lockPath moves the request's lock to the page seq (or drops it when
// hasSeq is false). The new lock is taken before the old one is dropped, so
// the shared ancestors are never unlocked in between. ix is the index the
// caller holds.
func (s *Service) lockPath(ix *cache.Index, r *request, seq uint64, hasSeq bool) error {
	if hasSeq {
		if r.hasLock && r.locked == seq {
			return nil
		}
		if _, err := ix.Lock(r.tenant, seq); err != nil {
			return err
		}
	}
	if r.hasLock {
		if _, err := ix.Unlock(r.tenant, r.locked); err != nil {
			s.cfg.Log.Error("unlock of a request's path failed", "request", r.id, "error", err)
		}
	}
	r.locked, r.hasLock = seq, hasSeq
	return nil
}

// endRequest drops the request's lock and frees its unused slots. It is
// idempotent. The service mutex must not be held (it frees pool slots).
func (s *Service) endRequest(r *request) int {
	if r.done {
		return 0
	}
	r.done = true
	n := len(r.owned)
	if n > 0 {
		if p := s.currentPools(); p != nil {
			slots := make([]pool.Slot, 0, n)
			for sl := range r.owned {
				slots = append(slots, sl)
			}
			sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
			if err := p.Set.Memory(tier.Device).Free(slots...); err != nil {
				s.cfg.Log.Error("freeing a request's unused slots failed", "request", r.id, "slots", len(slots), "error", err)
			}
		}
		r.owned = nil
	}
	// The slots are back in the pool before their reservation ends, so
	// the index never counts less than the pool holds.
	s.cfg.Index.Do(func(ix *cache.Index) {
		_ = s.lockPath(ix, r, 0, false)
		s.unreserve(ix, r, n)
	})
	s.mu.Lock()
	if s.requests[r.id] == r {
		delete(s.requests, r.id)
	}
	s.mu.Unlock()
	return n
}

// retireLocked ends every request of the live registration: the engine that
// held them is gone or re-registered. Service mutex held; it is released
// while the requests end.
func (s *Service) retireLocked(why string) {
	if len(s.requests) == 0 {
		s.reg = nil
		return
	}
	rs := make([]*request, 0, len(s.requests))
	for _, r := range s.requests {
		rs = append(rs, r)
	}
	s.reg = nil
	s.mu.Unlock()
	for _, r := range rs {
		r.mu.Lock()
		s.endRequest(r)
		r.mu.Unlock()
	}
	s.mu.Lock()
	s.cfg.Log.Info("released requests", "requests", len(rs), "why", why)
	s.fills.closeAll()
}

// reapIdle releases requests idle longer than RequestTTL.
func (s *Service) reapIdle() {
	cut := s.cfg.Now().Add(-s.cfg.RequestTTL)
	s.mu.Lock()
	var idle []*request
	for _, r := range s.requests {
		if r.touched.Before(cut) {
			idle = append(idle, r)
		}
	}
	s.mu.Unlock()
	for _, r := range idle {
		if !r.mu.TryLock() {
			continue // a call is running on it: not idle
		}
		if r.touched.Before(cut) {
			s.endRequest(r)
			s.cfg.Log.Warn("released an idle request", "request", r.id, "session", r.session, "idle_for", s.cfg.RequestTTL)
		}
		r.mu.Unlock()
	}
}

// unreserve releases n of the request's reserved device slots (they were
// committed, or are being freed). ix is the index the caller holds.
func (s *Service) unreserve(ix *cache.Index, r *request, n int) {
	if n == 0 {
		return
	}
	if err := ix.Unreserve(tier.Device, n); err != nil {
		s.cfg.Log.Error("releasing a request's slot reservation failed", "request", r.id, "slots", n, "error", err)
	}
}

// mapIndexErr turns index and pool errors into registry errors (host/errmap
// holds the one table of codes).
func mapIndexErr(err error, format string, args ...any) *errcode.Error {
	return errmap.Wrap(err, format, args...)
}
