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
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// A request lives from its Match to its Release or Finish (or until its
// registration retires, or it idles past RequestTTL). Its state is in
// three parts, each under one lock:
//
//   - what it was asked (id, session, tenant, prompt, messages) is set by
//     its Match (which marks the messages a splice edited) and never
//     changes after: read without a lock;
//   - its call protocol (phase, calls running, last use) and its record
//     (the pages matched and committed, its session turn): the request's
//     mutex, held only to read or change them, never across a call into
//     another package (the index, the pools, the mover, the splicer, the
//     ingress, the observer);
//   - what it holds in the index and the pools (one lock on the deepest
//     page it reads or wrote, which locks the whole path, and the device
//     slots it was allocated and has not committed): the index lock, so a
//     Commit and the request's end never interleave.
//
// A request's calls may overlap (an engine sends them in order, but a
// reaper or a retiring registration may end one in the middle of a call):
// each call checks the phase when it starts, and the index-side state
// when it changes it.
type request struct {
	id       string
	reg      *registration
	session  string
	tenant   string
	salt     blockid.Salt
	prompt   []uint32
	messages []chat.Message

	mu      sync.Mutex
	phase   phase
	calls   int // calls running on it: the reaper leaves it alone
	touched time.Time
	// matched is how many pages Match served; set once, when Match opens
	// the request.
	matched   int
	committed []uint32 // tokens of the full pages committed (or matched)
	hashes    []uint64 // sequence hashes of those pages
	turn      int      // the session's request count before this one

	held held // index lock

	// partsMu orders the parts' calls of a several-part save (parts.go);
	// parted holds those saves by first page until their last part commits.
	partsMu sync.Mutex
	parted  map[int]*partedSave
}

// phase is where a request is in its life.
type phase uint8

const (
	matching  phase = iota // its Match has not answered yet
	open                   // serving Allocate, Commit, Release, Finish
	finishing              // Finish is pinning its prefix, then ends it
	ended
)

// held is what a request holds in the index and the pools. The index lock
// guards it.
type held struct {
	// locked is the deepest page holding the request's lock.
	locked  uint64
	hasLock bool
	owned   map[pool.Slot]struct{}
	// released: the request ended; it may not lock or own anything more.
	released bool
}

// errEnded refuses a call on a request that ended.
func errEnded(id string) *errcode.Error {
	return errcode.New(errcode.UnknownRequest, "request %.64q ended", id)
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

// enter starts a call on an open request; leave ends it.
func (s *Service) enter(regID, reqID string) (*request, error) {
	r, err := s.requestOf(regID, reqID)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.phase {
	case matching:
		return nil, errcode.New(errcode.BadRequest, "request %.64q: its Match has not answered yet; send a request's calls one after another", r.id)
	case finishing, ended:
		return nil, errEnded(r.id)
	}
	r.calls++
	r.touched = s.cfg.Now()
	return r, nil
}

func (r *request) leave() {
	r.mu.Lock()
	r.calls--
	r.mu.Unlock()
}

// lockPath moves the request's lock to the page seq (or drops it when
// hasSeq is false). The new lock is taken before the old one is dropped, so
// the shared ancestors are never unlocked in between. An ended request
// takes no lock. ix is the index the caller holds.
func (s *Service) lockPath(ix *cache.Index, r *request, seq uint64, hasSeq bool) error {
	h := &r.held
	if hasSeq {
		if h.released {
			return errEnded(r.id)
		}
		if h.hasLock && h.locked == seq {
			return nil
		}
		if _, err := ix.Lock(r.tenant, seq); err != nil {
			return err
		}
	}
	if h.hasLock {
		if _, err := ix.Unlock(r.tenant, h.locked); err != nil {
			s.cfg.Log.Error("unlock of a request's path failed", "request", r.id, "error", err)
		}
	}
	h.locked, h.hasLock = seq, hasSeq
	return nil
}

// release ends the request: its lock is dropped, its unused slots freed,
// and it leaves the table. It returns how many slots it freed (0 when it
// had already ended). only, when set, must hold for the request (under
// its mutex) or it is left as it is. The service mutex must not be held
// (it frees pool slots).
func (s *Service) release(r *request, only func(*request) bool) (freed int, ok bool) {
	r.mu.Lock()
	if r.phase == ended || (only != nil && !only(r)) {
		r.mu.Unlock()
		return 0, false
	}
	r.phase = ended
	r.mu.Unlock()
	var slots []pool.Slot
	s.cfg.Index.Do(func(*cache.Index) {
		r.held.released = true
		for sl := range r.held.owned {
			slots = append(slots, sl)
		}
		r.held.owned = nil
	})
	if len(slots) > 0 {
		if p := s.currentPools(); p != nil {
			sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
			if err := p.Set.Memory(tier.Device).Free(slots...); err != nil {
				s.cfg.Log.Error("freeing a request's unused slots failed", "request", r.id, "slots", len(slots), "error", err)
			}
		}
	}
	// The slots are back in the pool before their reservation ends, so
	// the index never counts less than the pool holds.
	s.cfg.Index.Do(func(ix *cache.Index) {
		_ = s.lockPath(ix, r, 0, false)
		s.unreserve(ix, r, len(slots))
	})
	s.mu.Lock()
	if s.requests[r.id] == r {
		delete(s.requests, r.id)
	}
	s.mu.Unlock()
	return len(slots), true
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
		s.release(r, nil)
	}
	s.mu.Lock()
	s.cfg.Log.Info("released requests", "requests", len(rs), "why", why)
	s.fills.closeAll()
}

// reapIdle releases requests idle longer than RequestTTL; a request with a
// call running is not idle.
func (s *Service) reapIdle() {
	cut := s.cfg.Now().Add(-s.cfg.RequestTTL)
	s.mu.Lock()
	var idle []*request
	for _, r := range s.requests {
		idle = append(idle, r)
	}
	s.mu.Unlock()
	isIdle := func(r *request) bool { return r.phase == open && r.calls == 0 && r.touched.Before(cut) }
	for _, r := range idle {
		if _, ok := s.release(r, isIdle); ok {
			s.cfg.Log.Warn("released an idle request", "request", r.id, "session", r.session, "idle_for", s.cfg.RequestTTL)
		}
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
// holds the one table of codes); a registry error passes as it is.
func mapIndexErr(err error, format string, args ...any) *errcode.Error {
	return errmap.Wrap(err, format, args...)
}
