package pluginwire

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/chat"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// recorder is a policy that keeps what it observes.
type recorder struct{ seen []policy.Observation }

func (*recorder) Info() policy.Info               { return policy.Info{Name: "recorder"} }
func (*recorder) Configure(json.RawMessage) error { return nil }
func (r *recorder) Observe(_ context.Context, o policy.Observation) ([]policy.Directive, error) {
	r.seen = append(r.seen, o)
	return nil, nil
}

// TestProtoRoundTrip sends observations through ToProto and the plugin
// side's server, and checks the policy sees exactly what the host sent.
func TestProtoRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123)
	sent := []policy.Observation{
		{Seq: 1, Time: at, Kind: policy.KindRequestStarted, Session: "s", Tenant: "t", Started: &policy.RequestStarted{
			RequestID: "r", Turn: 3, PromptTokens: 900, PageSize: 16, BlockHashes: []uint64{1, 1 << 63},
			Messages: []chat.Message{{Role: "assistant", ToolName: "bash", Content: "c", Span: chat.Span{Start: 2, End: 9}, Thinking: []chat.Span{{Start: 2, End: 5}}, ThinkingText: "hm", Edited: true}}}},
		{Seq: 2, Time: at, Kind: policy.KindRequestFinished, Session: "s", Finished: &policy.RequestFinished{RequestID: "r",
			Usage: policy.Usage{InputTokens: 1, CachedTokens: 2, OutputTokens: 3, ReasoningTokens: 4}, CacheControl: policy.CacheControl{Type: "ephemeral", TTL: time.Hour}, BlockHashes: []uint64{5}, ReasoningBlocks: []uint64{6}}},
		{Seq: 3, Time: at, Kind: policy.KindKVEvent, KV: &policy.KVEvent{Type: policy.KVRemoved, Tier: "host", Parent: 9, HasParent: true, BlockHashes: []uint64{7}}},
		{Seq: 4, Time: at, Kind: policy.KindTick, Tick: &policy.Tick{Interval: time.Second}},
		{Seq: 5, Time: at, Kind: policy.KindTierPressure, Pressure: &policy.TierPressure{Tier: "device", UsedPages: 9, CapacityPages: 10, HighWatermark: 0.95}},
	}
	req := &pb.ObserveRequest{}
	for _, o := range sent {
		p, err := ToProto(o)
		if err != nil {
			t.Fatal(err)
		}
		req.Observations = append(req.Observations, p)
	}
	rec := &recorder{}
	resp, err := NewServer(rec, nil).Observe(context.Background(), req)
	if err != nil || len(resp.GetReplies()) != len(sent) {
		t.Fatalf("observe: %v, %d replies", err, len(resp.GetReplies()))
	}
	if !reflect.DeepEqual(rec.seen, sent) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", rec.seen, sent)
	}
}

func TestMalformedObservationsRefused(t *testing.T) {
	for _, o := range []policy.Observation{
		{Kind: policy.KindTick},
		{Kind: 99, Tick: &policy.Tick{}},
		{Kind: policy.KindTick, Tick: &policy.Tick{}, KV: &policy.KVEvent{}},
	} {
		if _, err := ToProto(o); err == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
}

// scoper answers every observation with the same directives.
type scoper struct{ ds []policy.Directive }

func (*scoper) Info() policy.Info               { return policy.Info{Name: "scoper"} }
func (*scoper) Configure(json.RawMessage) error { return nil }
func (s *scoper) Observe(context.Context, policy.Observation) ([]policy.Directive, error) {
	return s.ds, nil
}

// TestScopedRoundTrip checks that a directive a policy scopes to another
// tenant reaches the host with that tenant, and an unscoped one with none.
func TestScopedRoundTrip(t *testing.T) {
	d := directive.RevokeLease{LeaseID: "x"}
	p, err := ToProto(policy.Observation{Kind: policy.KindTick, Tick: &policy.Tick{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&scoper{ds: []policy.Directive{policy.WithTenant("acme", d), d}}, nil)
	resp, err := srv.Observe(context.Background(), &pb.ObserveRequest{Observations: []*pb.Observation{p}})
	if err != nil {
		t.Fatal(err)
	}
	res := decodeReply(resp.GetReplies()[0])
	if res.Err != nil || len(res.Tenants) != 2 || res.Tenants[0] != "acme" || res.Tenants[1] != "" || res.Directives[0] != directive.Directive(d) {
		t.Fatalf("decoded %+v", res)
	}
}

// A reply from a plugin built with an older SDK (directives as JSON) and a
// typed reply decode to the same directives and tenants.
func TestTypedAndLegacyRepliesAgree(t *testing.T) {
	ttl := directive.TTLOf(time.Minute)
	ds := []directive.Directive{
		directive.Cache{BlockHashes: []directive.Hash{1, 2}, Pin: true, TTL: ttl},
		directive.Splice{Session: "s", Start: 4, End: 9, Replacement: directive.Replacement{Tokens: []uint32{7}}},
		directive.RenewLease{LeaseID: "l", NewTTL: *ttl},
	}
	typed := &pb.Reply{Tenants: []string{"", "b", ""}}
	legacy := &pb.Reply{Tenants: typed.Tenants}
	for _, d := range ds {
		typed.Directives = append(typed.Directives, directive.ToProto(d))
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		legacy.DirectivesJson = append(legacy.DirectivesJson, b)
	}
	a, b := decodeReply(typed), decodeReply(legacy)
	if a.Err != nil || b.Err != nil {
		t.Fatalf("typed: %v, legacy: %v", a.Err, b.Err)
	}
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a.Directives, ds) {
		t.Fatalf("typed %#v\nlegacy %#v", a, b)
	}
}
