package pluginwire

import (
	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/policy"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// ToProto converts an observation to its wire form, for the host runtime.
func ToProto(o policy.Observation) (*pb.Observation, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	p := &pb.Observation{Seq: o.Seq, Session: o.Session, Tenant: o.Tenant}
	if !o.Time.IsZero() {
		p.TimeUnixNano = o.Time.UnixNano()
	}
	switch o.Kind {
	case policy.KindRequestStarted:
		s := o.Started
		ms := make([]*pb.Message, len(s.Messages))
		for i, m := range s.Messages {
			ms[i] = &pb.Message{
				Role: m.Role, ToolName: m.ToolName, Content: m.Content, Span: spanToProto(m.Span),
				Thinking: spansToProto(m.Thinking), ThinkingText: m.ThinkingText, Edited: m.Edited,
			}
		}
		p.Body = &pb.Observation_RequestStarted{RequestStarted: &pb.RequestStarted{
			RequestId: s.RequestID, Turn: s.Turn, PromptTokens: s.PromptTokens, PageSize: s.PageSize,
			BlockHashes: s.BlockHashes, Messages: ms,
		}}
	case policy.KindRequestFinished:
		f := o.Finished
		p.Body = &pb.Observation_RequestFinished{RequestFinished: &pb.RequestFinished{
			RequestId: f.RequestID,
			Usage: &pb.Usage{InputTokens: f.Usage.InputTokens, CachedTokens: f.Usage.CachedTokens,
				OutputTokens: f.Usage.OutputTokens, ReasoningTokens: f.Usage.ReasoningTokens},
			CacheControl:    &pb.CacheControl{Type: f.CacheControl.Type, TtlNanos: int64(f.CacheControl.TTL)},
			BlockHashes:     f.BlockHashes,
			ReasoningBlocks: f.ReasoningBlocks,
		}}
	case policy.KindKVEvent:
		k := o.KV
		p.Body = &pb.Observation_KvEvent{KvEvent: &pb.KVEvent{
			Type: pb.KVEvent_Type(k.Type), Tier: k.Tier, ParentHash: k.Parent, HasParent: k.HasParent, BlockHashes: k.BlockHashes,
		}}
	case policy.KindTick:
		p.Body = &pb.Observation_Tick{Tick: &pb.Tick{IntervalNanos: int64(o.Tick.Interval)}}
	case policy.KindTierPressure:
		t := o.Pressure
		p.Body = &pb.Observation_TierPressure{TierPressure: &pb.TierPressure{
			Tier: t.Tier, UsedPages: t.UsedPages, CapacityPages: t.CapacityPages, HighWatermark: t.HighWatermark,
		}}
	}
	return p, nil
}

func spanToProto(s chat.Span) *pb.Span { return &pb.Span{Start: s.Start, End: s.End} }

func spansToProto(ss []chat.Span) []*pb.Span {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*pb.Span, len(ss))
	for i, s := range ss {
		out[i] = spanToProto(s)
	}
	return out
}

func kindsFromProto(ks []pb.Kind) []policy.Kind {
	out := make([]policy.Kind, 0, len(ks))
	for _, k := range ks {
		out = append(out, policy.Kind(k))
	}
	return out
}
