package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/host/blockid"
	"github.com/kvpilot/kvpilot/host/cache"
	"github.com/kvpilot/kvpilot/host/mover"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/proto/convert"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// maxName bounds session, tenant and request ids.
const maxName = 256

func checkName(field, v string) error {
	if len(v) > maxName || !printable(v) {
		return errcode.New(errcode.BadRequest, "%s must be at most %d printable characters", field, maxName)
	}
	return nil
}

func status(err error) error { return convert.GRPCStatus(errcode.From(err)) }

// Match implements kvpilot.v1.Engine.
func (s *Service) Match(ctx context.Context, req *pb.MatchRequest) (*pb.MatchResponse, error) {
	resp, err := s.match(ctx, req)
	if err != nil {
		return nil, status(err)
	}
	return resp, nil
}

// match answers a Match in steps: check the request, start it, match and
// lock the cached path, load back what is off the device, serve the prefix
// that is on the device, then count and announce it.
func (s *Service) match(ctx context.Context, req *pb.MatchRequest) (*pb.MatchResponse, error) {
	msgs, err := s.checkMatch(req)
	if err != nil {
		return nil, err
	}
	r, pools, prev, err := s.startRequest(req, msgs)
	if err != nil {
		return nil, err
	}
	defer r.mu.Unlock() // startRequest took it: no other call finds r before Match answers
	if s.cfg.AutoSplice {
		s.autoSplice(ctx, r, prev) // before matching, without the index lock (splice INTEGRATION.md §4)
	}
	toks := req.GetTokens()
	m, missing, err := s.matchPath(r, toks)
	if err != nil {
		s.endRequest(r)
		return nil, err
	}
	pages := m.Pages
	resp := &pb.MatchResponse{RequestId: r.id, PageSize: uint32(s.cfg.Index.PageSize()), BlockHashes: append([]uint64(nil), m.Hashes.Sequence...)}
	var loadBack time.Duration
	if missing > 0 {
		loadBack = s.loadBack(ctx, req, r, pools, pages, resp)
	}
	slots, cut, err := s.servePrefix(r, pages, resp)
	if err != nil {
		s.endRequest(r)
		return nil, err
	}
	ps := s.cfg.Index.PageSize()
	r.matched = cut
	r.committed = append([]uint32(nil), toks[:cut*ps]...)
	r.hashes = append([]uint64(nil), resp.BlockHashes[:cut]...)
	resp.CachedTokens = uint32(cut * ps)
	resp.PageSlots = slots
	s.matched(r, toks, msgs, resp, loadBack)
	return resp, nil
}

// checkMatch checks a Match's names and sizes and reads its messages.
func (s *Service) checkMatch(req *pb.MatchRequest) ([]Message, error) {
	for _, f := range [][2]string{{"session", req.GetSession()}, {"tenant", req.GetTenant()}, {"request_id", req.GetRequestId()}} {
		if err := checkName(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	toks := req.GetTokens()
	if len(toks) > s.cfg.MaxTokens {
		return nil, errcode.New(errcode.TooMany, "%d tokens, limit %d", len(toks), s.cfg.MaxTokens)
	}
	return messagesFromProto(req.GetMessages(), len(toks))
}

// startRequest registers a running request under its id and returns it
// with its mutex held, the pools it uses and, for the session diff, the
// session's previous messages.
func (s *Service) startRequest(req *pb.MatchRequest, msgs []Message) (*request, *Pools, []Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, err := s.registrationOf(req.GetRegistrationId())
	if err != nil {
		return nil, nil, nil, err
	}
	id := req.GetRequestId()
	if id == "" {
		s.nextReq++
		id = "r" + strconv.FormatUint(s.nextReq, 10) + "-" + reg.id[:6]
	} else if s.requests[id] != nil {
		return nil, nil, nil, errcode.New(errcode.BadRequest, "request_id %.64q is already running; ids must be unique among running requests", id)
	}
	r := &request{
		id: id, reg: reg, session: req.GetSession(), tenant: req.GetTenant(), salt: s.cfg.Index.Salt(req.GetTenant()),
		prompt: append([]uint32(nil), req.GetTokens()...), messages: msgs, owned: map[pool.Slot]struct{}{}, touched: s.cfg.Now(),
	}
	r.mu.Lock()
	s.requests[id] = r
	s.stats.Matches++
	var prev []Message // touch replaces a session's messages, never edits them
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
func (s *Service) loadBack(ctx context.Context, req *pb.MatchRequest, r *request, pools *Pools, pages []cache.Page, resp *pb.MatchResponse) time.Duration {
	wait := s.cfg.LoadBackDeadline
	if ms := req.GetLoadBackDeadlineMs(); ms > 0 && time.Duration(ms)*time.Millisecond < wait {
		wait = time.Duration(ms) * time.Millisecond
	}
	seqs := make([]uint64, len(pages))
	for i, p := range pages {
		seqs[i] = p.Seq
	}
	start := time.Now()
	rep, err := pools.Mover.LoadBack(ctx, cache.TargetHashes(r.tenant, seqs...), start.Add(wait))
	took := time.Since(start)
	resp.LoadBackUs = uint32(min(took.Microseconds(), 1<<32-1))
	resp.LoadedPages, resp.LoadedBytes = uint32(rep.Copied), uint64(rep.Bytes)
	if err != nil && !errors.Is(err, mover.ErrIncomplete) {
		s.cfg.Log.Warn("load-back failed; serving the prefix on the device", "request", r.id, "error", err)
	}
	return took
}

// servePrefix finds the matched pages on the device now, and when the
// load-back fell short, moves the request's lock back to the prefix that
// is there. It returns their slots and how many pages they are.
func (s *Service) servePrefix(r *request, pages []cache.Page, resp *pb.MatchResponse) ([]uint32, int, error) {
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
	resp.LoadBackIncomplete = true
	resp.DroppedPages = uint32(len(pages) - cut)
	return slots, cut, nil
}

// matched counts a served Match, records the session's turn and tells the
// observer (the policies) that the request started.
func (s *Service) matched(r *request, toks []uint32, msgs []Message, resp *pb.MatchResponse, loadBack time.Duration) {
	ps, cut := int(resp.PageSize), r.matched
	s.mu.Lock()
	s.stats.PromptTokens += uint64(len(toks))
	s.stats.CachedTokens += uint64(cut * ps)
	s.stats.LoadedPages += uint64(resp.LoadedPages)
	if resp.LoadBackIncomplete {
		s.stats.LoadBackIncomplete++
	}
	r.turn, _ = s.sessions.touch(r.session, r.tenant, msgs)
	if ss := s.sessions.get(r.session, false); ss != nil && len(ss.Edited) > 0 {
		markEdited(msgs, ss.Edited)
	}
	s.mu.Unlock()
	s.observeMatch(len(toks), cut*ps, min(int(resp.LoadedPages), cut)*ps, loadBack)
	if o := s.cfg.Observer; o != nil {
		o.RequestStarted(RequestStarted{RequestID: r.id, Session: r.session, Tenant: r.tenant, Turn: r.turn, PageSize: ps, Tokens: r.prompt,
			BlockHashes: resp.BlockHashes, CachedTokens: cut * ps, Messages: msgs})
	}
}

// Allocate implements kvpilot.v1.Engine.
func (s *Service) Allocate(ctx context.Context, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	resp, err := s.allocate(ctx, req)
	if err != nil {
		return nil, status(err)
	}
	return resp, nil
}

func (s *Service) allocate(ctx context.Context, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	r, err := s.requestOf(req.GetRegistrationId(), req.GetRequestId())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, errcode.New(errcode.UnknownRequest, "request %.64q ended", r.id)
	}
	r.touched = s.cfg.Now()
	p := s.currentPools()
	dev := p.Set.Memory(tier.Device)
	n := int(req.GetPages())
	if capPages := dev.Stats().Capacity; n < 1 || int64(n) > capPages {
		return nil, errcode.New(errcode.BadRequest, "pages %d: want 1..%d (the device arena's capacity)", n, capPages)
	}
	resp := &pb.AllocateResponse{}
	// The slots count as used in the index from now until they are
	// committed or freed, so its eviction makes room for them.
	s.cfg.Index.Do(func(ix *cache.Index) { err = ix.Reserve(tier.Device, n) })
	if err != nil {
		return nil, mapIndexErr(err, "reserve %d device pages", n)
	}
	slots, evicted, err := s.allocSlots(ctx, p, dev, n)
	resp.EvictedPages = uint32(evicted)
	if err != nil {
		s.cfg.Index.Do(func(ix *cache.Index) { s.unreserve(ix, r, n) })
		st := dev.Stats()
		return nil, mapIndexErr(err, "allocate %d device pages: %d of %d free; the rest hold cached pages that are locked, pinned or not yet evictable, or slots of running requests", n, st.Free, st.Capacity)
	}
	for _, sl := range slots {
		r.owned[sl] = struct{}{}
	}
	resp.PageSlots = make([]uint32, len(slots))
	for i, sl := range slots {
		resp.PageSlots[i] = uint32(sl)
	}
	return resp, nil
}

// Commit implements kvpilot.v1.Engine.
func (s *Service) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	resp, err := s.commit(req)
	if err != nil {
		return nil, status(err)
	}
	return resp, nil
}

// commit answers a Commit in steps: check the request and its slots,
// insert the pages, lock what the request wrote, hand its slots to the
// index (freeing duplicates), then record the session's progress.
func (s *Service) commit(req *pb.CommitRequest) (*pb.CommitResponse, error) {
	r, err := s.requestOf(req.GetRegistrationId(), req.GetRequestId())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, errcode.New(errcode.UnknownRequest, "request %.64q ended", r.id)
	}
	r.touched = s.cfg.Now()
	toks, offered := req.GetTokens(), req.GetPageSlots()
	ps := s.cfg.Index.PageSize()
	if err := s.checkCommit(len(toks), len(offered), ps); err != nil {
		return nil, err
	}
	n := len(offered)
	h := blockid.Compute(toks[:n*ps], ps, r.salt)
	p := s.currentPools()
	capSlots := p.Set.Memory(tier.Device).Stats().Capacity

	var (
		res     cache.CommitResult
		cerr    error
		deepest int
		unused  map[uint64]bool
	)
	s.cfg.Index.Do(func(ix *cache.Index) {
		var locs []uint64
		if locs, err = s.commitSlots(ix, r, h, offered, capSlots); err != nil {
			return
		}
		cerr = ix.Commit(r.tenant, h, locs, &res)
		deepest = s.lockCommitted(ix, r, h, n)
		unused = s.endReservation(ix, r, offered, res.Unused)
	})
	if err != nil {
		return nil, err
	}

	s.freeDuplicates(r, p, offered, unused)
	s.recordCommitted(r, toks, h, deepest+1, res.Stored)
	s.kickStep()
	if cerr != nil {
		return nil, mapIndexErr(cerr, "commit %d pages of request %.64q (the first %d were committed)", n, r.id, deepest+1)
	}
	return &pb.CommitResponse{Stored: uint32(res.Stored), Present: uint32(res.Present), BlockHashes: h.Sequence}, nil
}

// checkCommit checks a Commit's sizes: tokens within the limit, and at
// least one slot, no more than the full pages of its tokens.
func (s *Service) checkCommit(tokens, slots, ps int) error {
	full := tokens / ps
	switch {
	case tokens > s.cfg.MaxTokens:
		return errcode.New(errcode.TooMany, "%d tokens, limit %d", tokens, s.cfg.MaxTokens)
	case slots == 0:
		return errcode.New(errcode.MissingField, "page_slots")
	case slots > full:
		return errcode.New(errcode.BadRequest, "%d page_slots for %d tokens: only %d full pages of %d tokens can be committed", slots, tokens, full, ps)
	}
	return nil
}

// commitSlotsLocked checks the offered slots and returns them as the
// pages' device locations. Every slot must be one this request was
// allocated, or the slot the page already has on the device (a matched
// page passed back). ix is the index the caller holds.
func (s *Service) commitSlots(ix *cache.Index, r *request, h blockid.Hashes, offered []uint32, capSlots int64) ([]uint64, error) {
	locs := make([]uint64, len(offered))
	seen := make(map[uint32]bool, len(offered))
	for i, sl := range offered {
		if int64(sl) >= capSlots || seen[sl] {
			return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d: out of range (%d slots) or given twice", i, sl, capSlots)
		}
		seen[sl] = true
		if _, ok := r.owned[pool.Slot(sl)]; !ok {
			info, ok := ix.Lookup(r.tenant, h.Sequence[i])
			if !ok || !info.Tiers.Has(tier.Device) || info.Loc[tier.Device] != uint64(sl) {
				return nil, errcode.New(errcode.InvalidSlot, "page_slots[%d] = %d was not allocated to request %.64q and does not hold that page", i, sl, r.id)
			}
		}
		locs[i] = uint64(sl)
	}
	return locs, nil
}

// lockCommittedLocked locks the deepest committed page now in the index,
// so what the request wrote stays while it decodes, and returns its
// index (-1: none). A connector-mode engine decodes from its own copy and
// has loaded its matched pages before it computes anything to commit: its
// staging slots are unlocked, free to be demoted at once, so the staging
// tier need only hold the pages in flight, not every running request's
// prompt. ix is the index the caller holds.
func (s *Service) lockCommitted(ix *cache.Index, r *request, h blockid.Hashes, n int) int {
	deepest := -1
	for i := n - 1; i >= 0; i-- {
		if info, ok := ix.Lookup(r.tenant, h.Sequence[i]); ok && info.Tiers.Has(tier.Device) {
			deepest = i
			break
		}
	}
	switch {
	case r.reg.mode == ModeConnector:
		if err := s.lockPath(ix, r, 0, false); err != nil {
			s.cfg.Log.Error("unlocking staged pages failed", "request", r.id, "error", err)
		}
	case deepest >= 0 && deepest+1 > r.matched:
		if err := s.lockPath(ix, r, h.Sequence[deepest], true); err != nil {
			s.cfg.Log.Error("locking committed pages failed", "request", r.id, "error", err)
		}
	}
	return deepest
}

// endReservationLocked ends the reservation of the request's offered slots
// that the index kept: they are the index's now. It returns the slots the
// index did not take (pages it already had), which freeDuplicates frees and
// unreserves after the index lock is dropped. ix is the index the caller
// holds.
func (s *Service) endReservation(ix *cache.Index, r *request, offered []uint32, notTaken []uint64) map[uint64]bool {
	unused := make(map[uint64]bool, len(notTaken))
	for _, u := range notTaken {
		unused[u] = true
	}
	committedOwned := 0
	for _, sl := range offered {
		if _, ok := r.owned[pool.Slot(sl)]; ok && !unused[uint64(sl)] {
			committedOwned++
		}
	}
	s.unreserve(ix, r, committedOwned)
	return unused
}

// recordCommitted remembers that the first n pages of toks are cached:
// on the request when that reaches deeper than it knew (Finish's
// cache_control pins and reports that prefix), and as the session's latest
// cached sequence. stored counts the pages the index newly took, for the
// service's stats. Request lock held; takes the service's mutex.
func (s *Service) recordCommitted(r *request, toks []uint32, h blockid.Hashes, n, stored int) {
	ps := s.cfg.Index.PageSize()
	if n > len(r.committed)/ps {
		r.committed = append(r.committed[:0], toks[:n*ps]...)
		r.hashes = append(r.hashes[:0], h.Sequence[:n]...)
	}
	s.mu.Lock()
	s.sessions.commit(r.session, r.tenant, toks, n*ps, h.Sequence[:n])
	s.stats.CommittedPages += uint64(stored)
	s.mu.Unlock()
}

// freeDuplicates drops the offered slots from the request's own and frees
// those the index did not take (pages it already had).
func (s *Service) freeDuplicates(r *request, p *Pools, offered []uint32, unused map[uint64]bool) {
	var free []pool.Slot
	for _, sl := range offered {
		if _, ok := r.owned[pool.Slot(sl)]; !ok {
			continue
		}
		delete(r.owned, pool.Slot(sl))
		if unused[uint64(sl)] {
			free = append(free, pool.Slot(sl))
		}
	}
	if len(free) == 0 {
		return
	}
	if err := p.Set.Memory(tier.Device).Free(free...); err != nil {
		s.cfg.Log.Error("freeing duplicate slots failed", "request", r.id, "error", err)
	}
	s.cfg.Index.Do(func(ix *cache.Index) { s.unreserve(ix, r, len(free)) })
}

// Release implements kvpilot.v1.Engine.
func (s *Service) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	r, err := s.requestOf(req.GetRegistrationId(), req.GetRequestId())
	if err != nil {
		return nil, status(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &pb.ReleaseResponse{FreedSlots: uint32(s.endRequest(r))}, nil
}

// Finish implements kvpilot.v1.Engine.
func (s *Service) Finish(ctx context.Context, req *pb.FinishRequest) (*pb.FinishResponse, error) {
	resp, err := s.finish(ctx, req)
	if err != nil {
		return nil, status(err)
	}
	return resp, nil
}

func (s *Service) finish(ctx context.Context, req *pb.FinishRequest) (*pb.FinishResponse, error) {
	cc, err := cacheControlOf(req)
	if err != nil {
		return nil, err
	}
	r, err := s.requestOf(req.GetRegistrationId(), req.GetRequestId())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil, errcode.New(errcode.UnknownRequest, "request %.64q ended", r.id)
	}
	resp := &pb.FinishResponse{}
	// Pin while the request still holds its lock, so nothing of the prefix
	// can be evicted between the end of the request and the pin.
	if cc.Present() && len(r.committed) > 0 {
		source := "engine:" + r.reg.engineID
		if r.reg.uid >= 0 {
			source = fmt.Sprintf("engine:uid=%d:%s", r.reg.uid, r.reg.engineID)
		}
		c := directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: r.committed}
		if cc.TTL > 0 {
			c.TTL = directive.TTLOf(cc.TTL)
		}
		rep := s.cfg.Ingress.CacheControl(ctx, source, r.tenant, c)
		if rep.Status == directive.StatusOK {
			resp.Pinned = true
			resp.PinnedBlocks = uint32(rep.Count())
			if rep.TotalBlocks != nil {
				resp.TotalBlocks = uint32(*rep.TotalBlocks)
			}
			resp.TtlMs = uint64(cc.TTL.Milliseconds())
			s.mu.Lock()
			s.stats.Pins++
			s.mu.Unlock()
		} else {
			resp.PinError = convert.ErrorToProto(&errcode.Error{Code: rep.Code, Detail: rep.Message, Index: -1})
		}
	}
	resp.FreedSlots = uint32(s.endRequest(r))
	if o := s.cfg.Observer; o != nil {
		u := req.GetUsage()
		o.RequestFinished(RequestFinished{RequestID: r.id, Session: r.session, Tenant: r.tenant, Turn: r.turn,
			InputTokens: int64(u.GetInputTokens()), CachedTokens: int64(u.GetCachedTokens()),
			OutputTokens: int64(u.GetOutputTokens()), ReasoningTokens: int64(u.GetReasoningTokens()),
			CacheControl: cc, CommittedTokens: len(r.committed), BlockHashes: r.hashes,
			ReasoningBlocks: reasoningPages(r.hashes, s.cfg.Index.PageSize(), len(r.prompt), int(u.GetReasoningTokens()))})
	}
	return resp, nil
}

// cacheControlOf reads Finish's cache_control from the message or its JSON
// (Anthropic or nvext form); when both are given they must agree.
func cacheControlOf(req *pb.FinishRequest) (enginewire.CacheControl, error) {
	var cc enginewire.CacheControl
	if m := req.GetCacheControl(); m != nil {
		d, err := enginewire.ParseTTL(m.GetTtl())
		if err != nil {
			return cc, err
		}
		cc = enginewire.CacheControl{Type: m.GetType(), TTL: d}
		if err := cc.Validate(); err != nil {
			return cc, err
		}
	}
	if js := req.GetCacheControlJson(); js != "" {
		if len(js) > 1<<20 {
			return cc, errcode.New(errcode.PayloadTooLarge, "cache_control_json of %d bytes", len(js))
		}
		j, err := enginewire.ParseCacheControlJSON([]byte(js))
		if err != nil {
			return cc, err
		}
		if cc.Present() && j.Present() && j != cc {
			return cc, errcode.New(errcode.BadRequest, "cache_control and cache_control_json disagree")
		}
		if j.Present() {
			cc = j
		}
	}
	return cc, nil
}

func messagesFromProto(ms []*pb.ChatMessage, ntoks int) ([]Message, error) {
	if len(ms) > 1<<16 {
		return nil, errcode.New(errcode.TooMany, "%d messages", len(ms))
	}
	out := make([]Message, 0, len(ms))
	span := func(i int, what string, sp *pb.TokenSpan) (int, int, error) {
		a, b := int(sp.GetStart()), int(sp.GetEnd())
		if a > b || b > ntoks {
			return 0, 0, errcode.New(errcode.InvalidSpan, "messages[%d].%s [%d, %d) outside the %d tokens", i, what, a, b, ntoks)
		}
		return a, b, nil
	}
	for i, m := range ms {
		a, b, err := span(i, "span", m.GetSpan())
		if err != nil {
			return nil, err
		}
		msg := Message{Role: m.GetRole(), ToolName: m.GetToolName(), Content: m.GetContent(), Start: a, End: b, ThinkingText: m.GetThinkingText()}
		for _, th := range m.GetThinking() {
			ta, tb, err := span(i, "thinking", th)
			if err != nil {
				return nil, err
			}
			msg.Thinking = append(msg.Thinking, [2]int{ta, tb})
		}
		out = append(out, msg)
	}
	return out, nil
}
