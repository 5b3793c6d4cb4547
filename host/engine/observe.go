package engine

import (
	"time"

	"github.com/kvpilot/kvpilot/host/metrics"
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
)

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
	// Turn is the session's request count before this one (from 0).
	Turn     int
	PageSize int
	Tokens   []uint32
	// BlockHashes are the sequence hashes of every full page of the prompt.
	BlockHashes  []uint64
	CachedTokens int
	// Messages carry spans over Tokens (the session's cached positions),
	// with Edited set where the host already spliced.
	Messages []chat.Message
}

// RequestFinished describes a finished request.
type RequestFinished struct {
	RequestID, Session, Tenant                               string
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens int64
	CacheControl                                             enginewire.CacheControl
	Turn                                                     int
	// CommittedTokens is the request's cached prefix (full pages);
	// BlockHashes their sequence hashes, root first.
	CommittedTokens int
	BlockHashes     []uint64
	// ReasoningBlocks are the committed output pages holding only
	// reasoning tokens (the output's first ReasoningTokens).
	ReasoningBlocks []uint64
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
	// AutoSplices counts session-diff splices before a Match.
	AutoSplices uint64
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

// observeMatch records a Match's tokens: prompt tokens served from the
// cache, loaded back first, and left to prefill, and the load-back's time
// when there was one.
func (s *Service) observeMatch(prompt, cached, loaded int, loadBack time.Duration) {
	m := s.cfg.Metrics
	if m == nil {
		return
	}
	m.EngineTokens.WithLabelValues(metrics.TokensMatched).Add(float64(cached))
	m.EngineTokens.WithLabelValues(metrics.TokensPrefilled).Add(float64(prompt - cached))
	m.EngineTokens.WithLabelValues(metrics.TokensLoaded).Add(float64(loaded))
	if loadBack > 0 {
		m.LoadBackLatency.Observe(loadBack.Seconds())
	}
}
