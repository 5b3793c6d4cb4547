package policy

import (
	"fmt"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// fromProto converts an observation from its wire form, refusing one whose
// body is missing or unknown.
func fromProto(p *pb.Observation) (Observation, error) {
	o := Observation{Seq: p.GetSeq(), Session: p.GetSession(), Tenant: p.GetTenant()}
	if ns := p.GetTimeUnixNano(); ns != 0 {
		o.Time = time.Unix(0, ns)
	}
	switch b := p.GetBody().(type) {
	case *pb.Observation_RequestStarted:
		s := b.RequestStarted
		o.Kind = KindRequestStarted
		ms := make([]chat.Message, len(s.GetMessages()))
		for i, m := range s.GetMessages() {
			ms[i] = chat.Message{
				Role: m.GetRole(), ToolName: m.GetToolName(), Content: m.GetContent(), Span: spanFromProto(m.GetSpan()),
				Thinking: spansFromProto(m.GetThinking()), ThinkingText: m.GetThinkingText(), Edited: m.GetEdited(),
			}
		}
		o.Started = &RequestStarted{
			RequestID: s.GetRequestId(), Turn: s.GetTurn(), PromptTokens: s.GetPromptTokens(), PageSize: s.GetPageSize(),
			BlockHashes: s.GetBlockHashes(), Messages: ms,
		}
	case *pb.Observation_RequestFinished:
		f := b.RequestFinished
		u := f.GetUsage()
		o.Kind = KindRequestFinished
		o.Finished = &RequestFinished{
			RequestID: f.GetRequestId(),
			Usage: Usage{InputTokens: u.GetInputTokens(), CachedTokens: u.GetCachedTokens(),
				OutputTokens: u.GetOutputTokens(), ReasoningTokens: u.GetReasoningTokens()},
			CacheControl:    CacheControl{Type: f.GetCacheControl().GetType(), TTL: time.Duration(f.GetCacheControl().GetTtlNanos())},
			BlockHashes:     f.GetBlockHashes(),
			ReasoningBlocks: f.GetReasoningBlocks(),
		}
	case *pb.Observation_KvEvent:
		k := b.KvEvent
		o.Kind = KindKVEvent
		o.KV = &KVEvent{Type: KVEventType(k.GetType()), Tier: k.GetTier(), Parent: k.GetParentHash(), HasParent: k.GetHasParent(), BlockHashes: k.GetBlockHashes()}
	case *pb.Observation_Tick:
		o.Kind = KindTick
		o.Tick = &Tick{Interval: time.Duration(b.Tick.GetIntervalNanos())}
	case *pb.Observation_TierPressure:
		t := b.TierPressure
		o.Kind = KindTierPressure
		o.Pressure = &TierPressure{Tier: t.GetTier(), UsedPages: t.GetUsedPages(), CapacityPages: t.GetCapacityPages(), HighWatermark: t.GetHighWatermark()}
	default:
		return Observation{}, fmt.Errorf("observation %d: no body (a newer host?)", p.GetSeq())
	}
	return o, nil
}

func spanFromProto(s *pb.Span) chat.Span { return chat.Span{Start: s.GetStart(), End: s.GetEnd()} }

func spansFromProto(ss []*pb.Span) []chat.Span {
	if len(ss) == 0 {
		return nil
	}
	out := make([]chat.Span, len(ss))
	for i, s := range ss {
		out[i] = spanFromProto(s)
	}
	return out
}
