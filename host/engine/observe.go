package engine

import "github.com/kvpilot/kvpilot/sdk/enginewire"

// Observer is told about requests, for the policy runtime's observations
// (request started with message spans, request finished with usage). Calls
// come from the request's goroutine outside every lock; they must not block.
type Observer interface {
	RequestStarted(RequestStarted)
	RequestFinished(RequestFinished)
}

// RequestStarted describes a matched request.
type RequestStarted struct {
	RequestID, Session, Tenant string
	Tokens                     []uint32
	BlockHashes                []uint64
	CachedTokens               int
	Messages                   []Message
}

// RequestFinished describes a finished request.
type RequestFinished struct {
	RequestID, Session, Tenant                               string
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens int64
	CacheControl                                             enginewire.CacheControl
	// CommittedTokens is the request's cached prefix (full pages).
	CommittedTokens int
}

// Stats counts what the service did since it started.
type Stats struct {
	Registrations      uint64
	Matches            uint64
	PromptTokens       uint64
	CachedTokens       uint64
	LoadedPages        uint64
	LoadBackIncomplete uint64
	CommittedPages     uint64
	Pins               uint64
	FillOrders         uint64
	// Requests running now.
	Running int
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running = len(s.requests)
	return st
}
