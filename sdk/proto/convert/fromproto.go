package convert

import (
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// DirectiveFromProto converts one directive. A message with no verb set (an
// empty oneof, or a verb added by a newer client) is unknown_verb; durations
// outside sdk/ttl's range are invalid_ttl. Each verb's mapping is defined
// with the verb, in sdk/directive.
func DirectiveFromProto(m *pb.Directive) (directive.Directive, error) { return directive.FromProto(m) }

// TurnFromApply converts an ApplyRequest. The caller sets Source from the
// verified peer. Errors name the directive's index.
func TurnFromApply(req *pb.ApplyRequest, l directive.Limits) (directive.Turn, error) {
	t := directive.Turn{ID: req.GetTurnId(), Tenant: req.GetTenant()}
	n := len(req.GetDirectives())
	max := l.MaxDirectives
	if max <= 0 {
		max = directive.DefaultMaxDirectives
	}
	if n > max {
		return t, errcode.New(errcode.TooMany, "%d directives in one turn, limit %d", n, max)
	}
	t.Directives = make([]directive.Directive, n)
	for i, m := range req.GetDirectives() {
		d, err := DirectiveFromProto(m)
		if err != nil {
			e, _ := errcode.As(err)
			return t, e.At(i)
		}
		t.Directives[i] = d
	}
	return t, nil
}

// ApplyResponseToReply converts a server's answer back for Go clients.
func ApplyResponseToReply(resp *pb.ApplyResponse) directive.TurnReply {
	r := directive.TurnReply{Status: directive.StatusError, TurnID: resp.GetTurnId(), Error: ErrorFromProto(resp.GetError()), Warning: resp.GetWarning()}
	if resp.GetOk() {
		r.Status = directive.StatusOK
	}
	r.Results = make([]directive.Result, len(resp.GetResults()))
	for i, m := range resp.GetResults() {
		r.Results[i] = ResultFromProto(m)
	}
	return r
}

// ResultFromProto converts one directive's result.
func ResultFromProto(m *pb.DirectiveResult) directive.Result {
	e := m.GetEffect()
	r := directive.Result{
		Index: int(m.GetIndex()), Verb: directive.Verb(m.GetVerb()), Status: directive.StatusError, Error: ErrorFromProto(m.GetError()),
		Effect: directive.Effect{Blocks: int(e.GetBlocks()), Skipped: int(e.GetSkipped()), Missing: int(e.GetMissing()), Tokens: e.GetTokens(), LeaseID: e.GetLeaseId(),
			RecomputedTokens: e.GetRecomputedTokens(), RecomputeRegion: e.GetRecomputeRegion()},
	}
	if m.GetOk() {
		r.Status = directive.StatusOK
	}
	if d := e.GetTtl(); d != nil {
		r.Effect.TTL = directive.TTL(d.AsDuration())
	}
	for _, sk := range e.GetSkips() {
		r.Effect.Skips = append(r.Effect.Skips, directive.Skip{Reason: directive.SkipReason(sk.GetReason()), Blocks: int(sk.GetBlocks())})
	}
	return r
}

// ErrorFromProto converts an error message; nil converts to nil. The code is
// kept even if this client's registry does not know it yet.
func ErrorFromProto(m *pb.Error) *errcode.Error {
	if m == nil {
		return nil
	}
	return &errcode.Error{Code: errcode.Code(m.GetCode()), Detail: m.GetDetail(), Index: int(m.GetIndex())}
}

// CacheControlFromProto converts a cache_control request and returns the
// tenant it names.
func CacheControlFromProto(m *pb.CacheControlRequest) (directive.CacheControl, string, error) {
	t, err := directive.TTLFromProto(m.GetTtl(), "ttl")
	c := directive.CacheControl{
		Action: directive.Action(m.GetAction()), BlockHashes: hashesFromProto(m.GetBlockHashes()),
		TokenIDs: m.GetTokenIds(), TTL: t, WorkerID: directive.WorkerID(m.GetWorkerId()),
	}
	return c, m.GetTenant(), err
}

// CacheControlReplyFromProto converts a cache_control reply back.
func CacheControlReplyFromProto(m *pb.CacheControlResponse) directive.CacheControlReply {
	r := directive.CacheControlReply{Status: m.GetStatus(), Message: m.GetMessage(), WorkerID: directive.WorkerID(m.GetWorkerId())}
	n := int(m.GetCount())
	switch m.GetCountField() {
	case "pinned_count":
		r.PinnedCount = &n
	case "unpinned_count":
		r.UnpinnedCount = &n
	case "evicted_count":
		r.EvictedCount = &n
	}
	if tb := int(m.GetTotalBlocks()); tb != 0 {
		r.TotalBlocks = &tb
	}
	if e := m.GetError(); e != nil {
		r.Code = errcode.Code(e.GetCode())
	}
	return r
}

// TierFromProto maps the enum to a tier name.
func TierFromProto(t pb.Tier) (directive.TierName, error) {
	if n, ok := tierNames[t]; ok {
		return n, nil
	}
	return "", errcode.New(errcode.InvalidTier, "%v", t)
}
