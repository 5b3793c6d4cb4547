package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// maxName bounds session, tenant and request ids.
const maxName = 256

// MatchArgs starts a request.
type MatchArgs struct {
	RegistrationID string
	// RequestID names the request; empty: the service names it.
	RequestID       string
	Session, Tenant string
	Tokens          []uint32
	// Messages carry spans over Tokens, each within them.
	Messages []chat.Message
	// LoadBackDeadline, when positive and shorter, caps the load-back
	// below Config.LoadBackDeadline.
	LoadBackDeadline time.Duration
}

// Matched answers a Match: the cached prefix on the device, locked for the
// request until it ends.
type Matched struct {
	RequestID string
	PageSize  int
	// BlockHashes are the sequence hashes of every full page of the
	// prompt, cached or not; PageSlots the device slots of the first
	// CachedTokens/PageSize of them.
	BlockHashes  []uint64
	CachedTokens int
	PageSlots    []uint32
	// LoadedPages and LoadedBytes came back from colder tiers in LoadBack;
	// when LoadBackIncomplete, DroppedPages matched pages did not make it
	// in time and are not served.
	LoadedPages        int
	LoadedBytes        int64
	LoadBack           time.Duration
	LoadBackIncomplete bool
	DroppedPages       int
}

// Match starts a request in steps: check it, register it, splice its
// session when it edits its cached history (auto-splice), match and lock
// the cached path, load back what is off the device, serve the prefix that
// is on the device, then open the request, count it and announce it.
func (s *Service) Match(ctx context.Context, a MatchArgs) (Matched, error) {
	if err := s.checkMatch(a); err != nil {
		return Matched{}, err
	}
	r, pools, prev, err := s.startRequest(a)
	if err != nil {
		return Matched{}, err
	}
	if s.cfg.AutoSplice {
		s.autoSplice(ctx, r, prev) // before matching, without the index lock (splice INTEGRATION.md §4)
	}
	m, missing, err := s.matchPath(r, a.Tokens)
	if err != nil {
		s.release(r, nil)
		return Matched{}, err
	}
	res := Matched{RequestID: r.id, PageSize: s.cfg.Index.PageSize(), BlockHashes: append([]uint64(nil), m.Hashes.Sequence...)}
	if missing > 0 {
		s.loadBack(ctx, a.LoadBackDeadline, r, pools, m.Pages, &res)
	}
	slots, cut, err := s.servePrefix(r, m.Pages, &res)
	if err != nil {
		s.release(r, nil)
		return Matched{}, err
	}
	res.CachedTokens, res.PageSlots = cut*res.PageSize, slots
	turn := s.countMatch(r, res)
	if err := s.openRequest(r, cut, res.BlockHashes[:cut], turn); err != nil {
		return Matched{}, err
	}
	s.announce(r, res, turn)
	return res, nil
}

// checkMatch checks a Match's names and sizes.
func (s *Service) checkMatch(a MatchArgs) error {
	for _, f := range [][2]string{{"session", a.Session}, {"tenant", a.Tenant}, {"request_id", a.RequestID}} {
		if len(f[1]) > maxName || !Printable(f[1]) {
			return errcode.New(errcode.BadRequest, "%s must be at most %d printable characters", f[0], maxName)
		}
	}
	if len(a.Tokens) > s.cfg.MaxTokens {
		return errcode.New(errcode.TooMany, "%d tokens, limit %d", len(a.Tokens), s.cfg.MaxTokens)
	}
	return checkSpans(a.Messages, len(a.Tokens))
}

// checkSpans checks that every message's span and thinking spans lie
// within the request's ntoks tokens.
func checkSpans(ms []chat.Message, ntoks int) error {
	if len(ms) > 1<<16 {
		return errcode.New(errcode.TooMany, "%d messages", len(ms))
	}
	outside := func(i int, what string, s chat.Span) error {
		if s.Start > s.End || s.End > int64(ntoks) || s.Start < 0 {
			return errcode.New(errcode.InvalidSpan, "messages[%d].%s [%d, %d) outside the %d tokens", i, what, s.Start, s.End, ntoks)
		}
		return nil
	}
	for i, m := range ms {
		if err := outside(i, "span", m.Span); err != nil {
			return err
		}
		for _, th := range m.Thinking {
			if err := outside(i, "thinking", th); err != nil {
				return err
			}
		}
	}
	return nil
}

// Printable reports whether v holds printable ASCII only, as the names a
// peer sends must.
func Printable(v string) bool {
	for _, r := range v {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}

// startRequest registers a running request under its id, matching, and
// returns it with the pools it uses and, for the session diff, the
// session's previous messages.
func (s *Service) startRequest(a MatchArgs) (*request, *Pools, []chat.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, err := s.registrationOf(a.RegistrationID)
	if err != nil {
		return nil, nil, nil, err
	}
	id := a.RequestID
	if id == "" {
		s.nextReq++
		id = "r" + strconv.FormatUint(s.nextReq, 10) + "-" + reg.id[:6]
	} else if s.requests[id] != nil {
		return nil, nil, nil, errcode.New(errcode.BadRequest, "request_id %.64q is already running; ids must be unique among running requests", id)
	}
	r := &request{
		id: id, reg: reg, session: a.Session, tenant: a.Tenant, salt: s.cfg.Index.Salt(a.Tenant),
		prompt: append([]uint32(nil), a.Tokens...), messages: a.Messages, touched: s.cfg.Now(),
		held: held{owned: map[pool.Slot]struct{}{}},
	}
	s.requests[id] = r
	s.stats.Matches++
	var prev []chat.Message // touch replaces a session's messages, never edits them
	if s.cfg.AutoSplice && r.session != "" {
		if ss := s.sessions.get(r.session, false); ss != nil {
			prev = ss.Messages
		}
	}
	return r, s.pools, prev, nil
}

// matchPath matches the prompt in the index and locks the matched path; it
// returns the match and how many of its pages are off the device.
func (s *Service) matchPath(r *request, toks []uint32) (m cache.MatchResult, missing int, err error) {
	s.cfg.Index.Do(func(ix *cache.Index) {
		ix.Match(r.tenant, r.salt, toks, &m)
		for _, p := range m.Pages {
			if !p.Tiers.Has(tier.Device) {
				missing++
			}
		}
		if len(m.Pages) > 0 {
			err = s.lockPath(ix, r, m.Pages[len(m.Pages)-1].Seq, true)
		}
	})
	if err != nil {
		return m, 0, mapIndexErr(err, "lock the matched path")
	}
	return m, missing, nil
}

// loadBack brings the matched pages back to the device, all or nothing,
// within the request's deadline: they are locked, so they cannot be
// evicted while they come back. A failure is logged; the prefix on the
// device is served.
func (s *Service) loadBack(ctx context.Context, deadline time.Duration, r *request, pools *Pools, pages []cache.Page, res *Matched) {
	wait := s.cfg.LoadBackDeadline
	if deadline > 0 && deadline < wait {
		wait = deadline
	}
	seqs := make([]uint64, len(pages))
	for i, p := range pages {
		seqs[i] = p.Seq
	}
	start := time.Now()
	rep, err := pools.Mover.LoadBack(ctx, cache.TargetHashes(r.tenant, seqs...), start.Add(wait))
	res.LoadBack = time.Since(start)
	res.LoadedPages, res.LoadedBytes = rep.Copied, int64(rep.Bytes)
	if err != nil && !errors.Is(err, mover.ErrIncomplete) {
		s.cfg.Log.Warn("load-back failed; serving the prefix on the device", "request", r.id, "error", err)
	}
}

// servePrefix finds the matched pages on the device now, and when the
// load-back fell short, moves the request's lock back to the prefix that
// is there. It returns their slots and how many pages they are.
func (s *Service) servePrefix(r *request, pages []cache.Page, res *Matched) ([]uint32, int, error) {
	slots := make([]uint32, 0, len(pages))
	cut := len(pages)
	var err error
	s.cfg.Index.Do(func(ix *cache.Index) {
		for i, p := range pages {
			info, ok := ix.Lookup(r.tenant, p.Seq)
			if !ok || !info.Tiers.Has(tier.Device) {
				cut = i
				break
			}
			slots = append(slots, uint32(info.Loc[tier.Device]))
		}
		switch {
		case cut == len(pages):
		case cut > 0:
			err = s.lockPath(ix, r, pages[cut-1].Seq, true)
		default:
			err = s.lockPath(ix, r, 0, false)
		}
	})
	if cut == len(pages) {
		return slots, cut, nil
	}
	if err != nil {
		return nil, 0, mapIndexErr(err, "lock the loaded prefix")
	}
	res.LoadBackIncomplete = true
	res.DroppedPages = len(pages) - cut
	return slots, cut, nil
}

// countMatch counts a served Match and records the session's turn (marking
// the messages a splice edited); it returns the turn.
func (s *Service) countMatch(r *request, res Matched) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.PromptTokens += uint64(len(r.prompt))
	s.stats.CachedTokens += uint64(res.CachedTokens)
	s.stats.LoadedPages += uint64(res.LoadedPages)
	if res.LoadBackIncomplete {
		s.stats.LoadBackIncomplete++
	}
	turn, _ := s.sessions.touch(r.session, r.tenant, r.messages)
	if ss := s.sessions.get(r.session, false); ss != nil && len(ss.Edited) > 0 {
		markEdited(r.messages, ss.Edited)
	}
	return turn
}

// openRequest records what Match served and opens the request to its
// other calls; a request its registration retired meanwhile stays ended.
func (s *Service) openRequest(r *request, pages int, hashes []uint64, turn int) error {
	ps := s.cfg.Index.PageSize()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != matching {
		return errEnded(r.id)
	}
	r.phase = open
	r.matched, r.turn = pages, turn
	r.committed = append([]uint32(nil), r.prompt[:pages*ps]...)
	r.hashes = append([]uint64(nil), hashes...)
	return nil
}

// announce records the Match's token metrics and tells the observer (the
// policies) that the request started.
func (s *Service) announce(r *request, res Matched, turn int) {
	ps := res.PageSize
	s.observeMatch(len(r.prompt), res.CachedTokens, min(res.LoadedPages, res.CachedTokens/ps)*ps, res.LoadBack)
	if o := s.cfg.Observer; o != nil {
		o.RequestStarted(RequestStarted{RequestID: r.id, Session: r.session, Tenant: r.tenant, Turn: turn, PageSize: ps, Tokens: r.prompt,
			BlockHashes: res.BlockHashes, CachedTokens: res.CachedTokens, Messages: r.messages})
	}
}
