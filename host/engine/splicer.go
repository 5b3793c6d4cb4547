package engine

import (
	"context"
	"slices"

	"github.com/kvpilot/kvpilot/host/splice"
	"github.com/kvpilot/kvpilot/sdk/chat"
)

// The service is the splicer's source of sessions (splice.Sessions) and its
// fill path (Fill). The host builds a splicer for each registered layout
// (Config.OnRegister) and hands it back with SetSplicer, which Match uses
// for session diff when Config.AutoSplice is on.

// SetSplicer installs the splicer of the live registration (nil: none).
func (s *Service) SetSplicer(sp *splice.Splicer) { s.splicer.Store(sp) }

// Splicer returns the installed splicer, or nil.
func (s *Service) Splicer() *splice.Splicer { return s.splicer.Load() }

// SpliceSessions returns the service's sessions as the splicer reads them.
// Its methods take the service mutex only, never the index lock.
func (s *Service) SpliceSessions() splice.Sessions { return spliceSessions{s} }

// SpliceFill is the splicer's Config.Fill: the order goes to the engine's
// fill stream and the call returns when the engine completed it.
func (s *Service) SpliceFill(ctx context.Context, o splice.FillOrder) (splice.FillResult, error) {
	return s.Fill(ctx, o)
}

type spliceSessions struct{ s *Service }

func (a spliceSessions) Session(id string) (splice.Session, bool) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions.get(id, false)
	if ss == nil || len(ss.Tokens) == 0 {
		return splice.Session{}, false
	}
	return splice.Session{ID: ss.ID, Tenant: ss.Tenant, Tokens: slices.Clone(ss.Tokens), Cached: ss.CachedTokens}, true
}

func (a spliceSessions) SetSession(sess splice.Session) {
	a.s.SetSessionTokens(sess.ID, sess.Tenant, sess.Tokens, sess.Cached)
}

// Leaves reads the leaf hash each session of tenant's namespace stored at
// its last commit (another tenant sharing the namespace shares pages).
func (a spliceSessions) Leaves(tenant, except string) []uint64 {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.sessions.inNamespace(tenant)
	out := make([]uint64, 0, len(m))
	for id, ss := range m {
		if id != except && len(ss.hashes) > 0 {
			out = append(out, ss.hashes[len(ss.hashes)-1])
		}
	}
	return out
}

// Through scans the stored page hashes of the sessions in tenant's
// namespace (no rehashing);
// sessions come back in id order, so a turn's splices are deterministic.
func (a spliceSessions) Through(tenant string, seq uint64) []splice.Session {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []splice.Session
	for _, ss := range s.sessions.inNamespace(tenant) {
		if slices.Contains(ss.hashes, seq) {
			out = append(out, splice.Session{ID: ss.ID, Tenant: ss.Tenant, Tokens: slices.Clone(ss.Tokens), Cached: ss.CachedTokens})
		}
	}
	slices.SortFunc(out, func(x, y splice.Session) int {
		switch {
		case x.ID < y.ID:
			return -1
		case x.ID > y.ID:
			return 1
		}
		return 0
	})
	return out
}

// autoSplice runs session diff before a Match (index.auto_splice): when the
// request edits the session's cached history, the splicer edits the cache
// to match, so the Match that follows hits past the edit. prev are the
// messages of the session's previous request (their spans index its cached
// sequence). Failures only cost cache hits: they are logged.
func (s *Service) autoSplice(ctx context.Context, r *request, prev []chat.Message) {
	sp := s.Splicer()
	if sp == nil || r.session == "" {
		return
	}
	if cur, ok := s.Session(r.session); !ok || cur.Tenant != r.tenant {
		return // a session id reused by another tenant is not its history
	}
	res, spliced, err := sp.AutoSplice(ctx, r.session, spansOf(prev), r.prompt, spansOf(r.messages))
	if err != nil {
		s.cfg.Log.Warn("session diff: splice failed; the request re-prefills after the edit", "session", r.session, "error", err)
		return
	}
	if spliced {
		s.mu.Lock()
		s.stats.AutoSplices++
		s.mu.Unlock()
		s.cfg.Log.Debug("session diff spliced", "session", r.session, "delta", res.Delta, "kept_pages", res.Kept, "new_pages", res.NewPages, "fill_tokens", res.FillTokens)
	}
}

// spansOf returns the messages' non-empty spans (session diff aligns
// messages by their tokens; an empty one has none to align).
func spansOf(ms []chat.Message) []splice.Span {
	out := make([]splice.Span, 0, len(ms))
	for _, m := range ms {
		if m.Span.End > m.Span.Start {
			out = append(out, splice.Span{Start: int(m.Span.Start), End: int(m.Span.End)})
		}
	}
	return out
}
