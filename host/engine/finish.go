package engine

import (
	"context"
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Release ends request reqID: its locks are dropped and the slots it was
// allocated and did not commit are freed. It returns how many.
func (s *Service) Release(regID, reqID string) (int, error) {
	r, err := s.enter(regID, reqID)
	if err != nil {
		return 0, err
	}
	defer r.leave()
	freed, _ := s.release(r, nil)
	return freed, nil
}

// Usage is what a request used, as the engine reports it at Finish.
type Usage struct {
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens int64
}

// FinishArgs ends a request with its usage and its cache_control.
type FinishArgs struct {
	RegistrationID, RequestID string
	Usage                     Usage
	// CacheControl, when present, pins the request's cached prefix for its
	// TTL.
	CacheControl enginewire.CacheControl
}

// Finished answers a Finish.
type Finished struct {
	FreedSlots int
	// Pinned: the prefix is pinned, PinnedBlocks of its TotalBlocks full
	// pages. PinError says why a pin asked for was refused; the request
	// ended all the same.
	Pinned                    bool
	PinnedBlocks, TotalBlocks int
	PinError                  *errcode.Error
}

// Finish is Release plus the request's usage and cache_control: with one,
// the prefix it cached is pinned through the ingress (counted, audited and
// budgeted as every door's directives) before the request ends, so
// nothing of it can be evicted in between: the request's lock on its path
// holds until then. The request is marked finishing first, so no other
// call ends it meanwhile; its mutex is not held while the ingress runs.
func (s *Service) Finish(ctx context.Context, a FinishArgs) (Finished, error) {
	r, err := s.enter(a.RegistrationID, a.RequestID)
	if err != nil {
		return Finished{}, err
	}
	defer r.leave()
	r.mu.Lock()
	if r.phase != open {
		r.mu.Unlock()
		return Finished{}, errEnded(r.id)
	}
	r.phase = finishing
	committed, hashes, turn := r.committed, r.hashes, r.turn
	r.mu.Unlock()

	var out Finished
	if a.CacheControl.Present() && len(committed) > 0 {
		s.pinPrefix(ctx, r, committed, a.CacheControl, &out)
	}
	out.FreedSlots, _ = s.release(r, nil)
	if o := s.cfg.Observer; o != nil {
		u := a.Usage
		o.RequestFinished(RequestFinished{RequestID: r.id, Session: r.session, Tenant: r.tenant, Turn: turn,
			InputTokens: u.InputTokens, CachedTokens: u.CachedTokens, OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens,
			CacheControl: a.CacheControl, CommittedTokens: len(committed), BlockHashes: hashes,
			ReasoningBlocks: reasoningPages(hashes, s.cfg.Index.PageSize(), len(r.prompt), int(u.ReasoningTokens))})
	}
	return out, nil
}

// pinPrefix pins the committed prefix for cc's TTL through the ingress,
// under the engine's name.
func (s *Service) pinPrefix(ctx context.Context, r *request, committed []uint32, cc enginewire.CacheControl, out *Finished) {
	source := "engine:" + r.reg.engineID
	if r.reg.uid >= 0 {
		source = fmt.Sprintf("engine:uid=%d:%s", r.reg.uid, r.reg.engineID)
	}
	c := directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: committed}
	if cc.TTL > 0 {
		c.TTL = directive.TTLOf(cc.TTL)
	}
	rep := s.cfg.Ingress.CacheControl(ctx, source, r.tenant, c)
	if rep.Status != directive.StatusOK {
		out.PinError = &errcode.Error{Code: rep.Code, Detail: rep.Message, Index: -1}
		return
	}
	out.Pinned = true
	out.PinnedBlocks = rep.Count()
	if rep.TotalBlocks != nil {
		out.TotalBlocks = *rep.TotalBlocks
	}
	s.mu.Lock()
	s.stats.Pins++
	s.mu.Unlock()
}

// reasoningPages returns the hashes of the committed pages that hold only
// reasoning tokens: the first reasoning tokens of the output, which begins
// after the prompt (engines emit the thinking before the answer). They are
// candidates for a transient mark (think-evict).
func reasoningPages(hashes []uint64, pageSize, prompt, reasoning int) []uint64 {
	if reasoning <= 0 || pageSize <= 0 {
		return nil
	}
	var out []uint64
	first := (prompt + pageSize - 1) / pageSize
	for i := first; i < len(hashes) && (i+1)*pageSize <= prompt+reasoning; i++ {
		out = append(out, hashes[i])
	}
	return out
}
