package policy

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
)

func TestProtoRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123)
	for _, o := range []Observation{
		{Seq: 1, Time: at, Kind: KindRequestStarted, Session: "s", Tenant: "t", Started: &RequestStarted{
			RequestID: "r", Turn: 3, PromptTokens: 900, PageSize: 16, BlockHashes: []uint64{1, 1 << 63},
			Messages: []Message{{Role: "assistant", ToolName: "bash", Content: "c", Span: Span{2, 9}, Thinking: []Span{{2, 5}}, ThinkingText: "hm", Edited: true}}}},
		{Seq: 2, Time: at, Kind: KindRequestFinished, Session: "s", Finished: &RequestFinished{RequestID: "r",
			Usage: Usage{1, 2, 3, 4}, CacheControl: CacheControl{Type: "ephemeral", TTL: time.Hour}, BlockHashes: []uint64{5}, ReasoningBlocks: []uint64{6}}},
		{Seq: 3, Time: at, Kind: KindKVEvent, KV: &KVEvent{Type: KVRemoved, Tier: "host", Parent: 9, HasParent: true, BlockHashes: []uint64{7}}},
		{Seq: 4, Time: at, Kind: KindTick, Tick: &Tick{Interval: time.Second}},
		{Seq: 5, Time: at, Kind: KindTierPressure, Pressure: &TierPressure{Tier: "device", UsedPages: 9, CapacityPages: 10, HighWatermark: 0.95}},
	} {
		p, err := ToProto(o)
		if err != nil {
			t.Fatal(err)
		}
		back, err := FromProto(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(o, back) {
			t.Fatalf("round trip of %v:\n got %+v\nwant %+v", o.Kind, back, o)
		}
	}
}

func TestMalformedObservationsRefused(t *testing.T) {
	for _, o := range []Observation{
		{Kind: KindTick},
		{Kind: 99, Tick: &Tick{}},
		{Kind: KindTick, Tick: &Tick{}, KV: &KVEvent{}},
	} {
		if _, err := ToProto(o); err == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
}

func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		host, plugin []uint32
		want         uint32
	}{
		{[]uint32{1}, nil, 1},
		{[]uint32{1, 2}, []uint32{2, 3}, 2},
		{[]uint32{2}, []uint32{1}, 0},
	} {
		if got := Negotiate(c.host, c.plugin); got != c.want {
			t.Fatalf("Negotiate(%v, %v) = %d, want %d", c.host, c.plugin, got, c.want)
		}
	}
}

func TestDecodeParams(t *testing.T) {
	var p struct {
		D directive.TTL `json:"d"`
		N int           `json:"n"`
	}
	if err := DecodeParams([]byte(`{"d":"5m","n":2}`), &p); err != nil || p.D.Duration() != 5*time.Minute || p.N != 2 {
		t.Fatalf("%+v %v", p, err)
	}
	if err := DecodeParams([]byte(`{"d":90}`), &p); err != nil || p.D.Duration() != 90*time.Second {
		t.Fatalf("%+v %v", p, err)
	}
	if err := DecodeParams([]byte(`{"typo":1}`), &p); err == nil {
		t.Fatal("unknown key accepted")
	}
	if err := DecodeParams([]byte(`{"d":"-1s"}`), &p); err == nil {
		t.Fatal("negative duration accepted")
	}
}

func TestRunRefusesWithoutHost(t *testing.T) {
	t.Setenv(Handshake.MagicCookieKey, "")
	if err := Run(nil); !errors.Is(err, ErrNotLaunchedByHost) {
		t.Fatalf("err %v", err)
	}
}
