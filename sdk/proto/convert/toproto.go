package convert

import (
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// DirectiveToProto converts one directive; nil converts to nil. Each verb's
// mapping is defined with the verb, in sdk/directive.
func DirectiveToProto(d directive.Directive) *pb.Directive { return directive.ToProto(d) }

// TurnToApply builds an ApplyRequest; the source is not sent, since the
// server takes it from the verified peer.
func TurnToApply(t directive.Turn) *pb.ApplyRequest {
	req := &pb.ApplyRequest{TurnId: t.ID, Tenant: t.Tenant, Directives: make([]*pb.Directive, len(t.Directives))}
	for i, d := range t.Directives {
		req.Directives[i] = DirectiveToProto(d)
	}
	return req
}

// TurnReplyToProto converts the executor's answer to a turn.
func TurnReplyToProto(r directive.TurnReply) *pb.ApplyResponse {
	resp := &pb.ApplyResponse{Ok: r.OK(), TurnId: r.TurnID, Error: ErrorToProto(r.Error), Results: make([]*pb.DirectiveResult, len(r.Results)), Warning: r.Warning}
	for i, res := range r.Results {
		resp.Results[i] = ResultToProto(res)
	}
	return resp
}

// ResultToProto converts one directive's result.
func ResultToProto(r directive.Result) *pb.DirectiveResult {
	e := r.Effect
	out := &pb.DirectiveResult{
		Index: int32(r.Index), Verb: string(r.Verb), Ok: r.OK(), Error: ErrorToProto(r.Error),
		Effect: &pb.Effect{Blocks: int64(e.Blocks), Skipped: int64(e.Skipped), Missing: int64(e.Missing), Tokens: e.Tokens, LeaseId: e.LeaseID,
			RecomputedTokens: e.RecomputedTokens, RecomputeRegion: e.RecomputeRegion},
	}
	if e.TTL != 0 {
		out.Effect.Ttl = durationpb.New(e.TTL.Duration())
	}
	for _, sk := range e.Skips {
		out.Effect.Skips = append(out.Effect.Skips, &pb.Skip{Reason: string(sk.Reason), Blocks: int64(sk.Blocks)})
	}
	return out
}

// ErrorToProto converts a registry error; nil converts to nil.
func ErrorToProto(e *errcode.Error) *pb.Error {
	if e == nil {
		return nil
	}
	ent := e.Entry()
	return &pb.Error{Code: string(ent.Code), Number: uint32(ent.Number), Message: ent.Message, Hint: ent.Hint, Detail: e.Details(), Index: int32(e.Index)}
}

// CacheControlToProto converts a cache_control request.
func CacheControlToProto(c directive.CacheControl, tenant string) *pb.CacheControlRequest {
	return &pb.CacheControlRequest{
		Action: string(c.Action), BlockHashes: hashesToProto(c.BlockHashes), TokenIds: c.TokenIDs,
		Ttl: directive.TTLToProto(c.TTL), WorkerId: string(c.WorkerID), Tenant: tenant,
	}
}

// CacheControlReplyToProto converts a cache_control reply.
func CacheControlReplyToProto(r directive.CacheControlReply) *pb.CacheControlResponse {
	out := &pb.CacheControlResponse{Status: r.Status, Message: r.Message, WorkerId: string(r.WorkerID)}
	switch {
	case r.PinnedCount != nil:
		out.Count, out.CountField = int64(*r.PinnedCount), "pinned_count"
	case r.UnpinnedCount != nil:
		out.Count, out.CountField = int64(*r.UnpinnedCount), "unpinned_count"
	case r.EvictedCount != nil:
		out.Count, out.CountField = int64(*r.EvictedCount), "evicted_count"
	}
	if r.TotalBlocks != nil {
		out.TotalBlocks = int64(*r.TotalBlocks)
	}
	if r.Code != "" {
		out.Error = ErrorToProto(&errcode.Error{Code: r.Code, Detail: r.Message, Index: -1})
	}
	return out
}

// TierToProto maps a tier name (any ParseTierName spelling) to the enum;
// unknown names map to TIER_UNSPECIFIED.
func TierToProto(name string) pb.Tier {
	n, err := directive.ParseTierName(name)
	if err != nil {
		return pb.Tier_TIER_UNSPECIFIED
	}
	for t, tn := range tierNames {
		if tn == n {
			return t
		}
	}
	return pb.Tier_TIER_UNSPECIFIED
}
