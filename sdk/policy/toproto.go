package policy

import (
	"encoding/json"
	"fmt"

	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// ToProto converts an observation to its wire form. The host runtime uses
// it; policies never need to.
func ToProto(o Observation) (*pb.Observation, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	p := &pb.Observation{Seq: o.Seq, Session: o.Session, Tenant: o.Tenant}
	if !o.Time.IsZero() {
		p.TimeUnixNano = o.Time.UnixNano()
	}
	switch o.Kind {
	case KindRequestStarted:
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
	case KindRequestFinished:
		f := o.Finished
		p.Body = &pb.Observation_RequestFinished{RequestFinished: &pb.RequestFinished{
			RequestId: f.RequestID,
			Usage: &pb.Usage{InputTokens: f.Usage.InputTokens, CachedTokens: f.Usage.CachedTokens,
				OutputTokens: f.Usage.OutputTokens, ReasoningTokens: f.Usage.ReasoningTokens},
			CacheControl:    &pb.CacheControl{Type: f.CacheControl.Type, TtlNanos: int64(f.CacheControl.TTL)},
			BlockHashes:     f.BlockHashes,
			ReasoningBlocks: f.ReasoningBlocks,
		}}
	case KindKVEvent:
		k := o.KV
		p.Body = &pb.Observation_KvEvent{KvEvent: &pb.KVEvent{
			Type: pb.KVEvent_Type(k.Type), Tier: k.Tier, ParentHash: k.Parent, HasParent: k.HasParent, BlockHashes: k.BlockHashes,
		}}
	case KindTick:
		p.Body = &pb.Observation_Tick{Tick: &pb.Tick{IntervalNanos: int64(o.Tick.Interval)}}
	case KindTierPressure:
		t := o.Pressure
		p.Body = &pb.Observation_TierPressure{TierPressure: &pb.TierPressure{
			Tier: t.Tier, UsedPages: t.UsedPages, CapacityPages: t.CapacityPages, HighWatermark: t.HighWatermark,
		}}
	}
	return p, nil
}

func spanToProto(s Span) *pb.Span { return &pb.Span{Start: s.Start, End: s.End} }

func spansToProto(ss []Span) []*pb.Span {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*pb.Span, len(ss))
	for i, s := range ss {
		out[i] = spanToProto(s)
	}
	return out
}

func kindsToProto(ks []Kind) []pb.Kind {
	out := make([]pb.Kind, len(ks))
	for i, k := range ks {
		out[i] = pb.Kind(k)
	}
	return out
}

// replyToProto encodes one observation's answer.
func replyToProto(ds []Directive, err error) (*pb.Reply, error) {
	if err != nil {
		return &pb.Reply{Error: err.Error()}, nil
	}
	r := &pb.Reply{DirectivesJson: make([][]byte, 0, len(ds))}
	scoped := false
	tenants := make([]string, len(ds))
	for i, d := range ds {
		tenants[i], d = Unwrap(d)
		scoped = scoped || tenants[i] != ""
		if d == nil {
			return &pb.Reply{Error: fmt.Sprintf("directive %d is nil", i)}, nil
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode directive %d (%s): %w", i, d.Verb(), err)
		}
		r.DirectivesJson = append(r.DirectivesJson, b)
	}
	if scoped {
		r.Tenants = tenants
	}
	return r, nil
}
