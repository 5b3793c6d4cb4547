package convert

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// every verb, with every field set to something non-zero where it can be
var allVerbs = []directive.Directive{
	directive.Warm{BlockKeys: []directive.BlockKey{"abc123...", "0x10"}, TargetTier: "CPU_TIER1"},
	directive.Prune{AfterBlockHash: 1<<63 + 5},
	directive.Cache{BlockHashes: []directive.Hash{1, 1 << 63}, Pin: true, TTL: directive.TTLOf(5 * time.Minute)},
	directive.Cache{BlockHashes: []directive.Hash{2}},
	directive.Think{BlockHashes: []directive.Hash{3}, Transient: true},
	directive.Pause{BlockHashes: []directive.Hash{4}, TTL: directive.TTLOf(time.Hour), LeaseID: "l1"},
	directive.Pause{BlockHashes: []directive.Hash{4}, LeaseID: "indefinite"},
	directive.RenewLease{LeaseID: "l1", NewTTL: directive.TTL(2 * time.Hour)},
	directive.RevokeLease{LeaseID: "l1"},
	directive.Splice{Session: "s", Start: 4, End: 9, Replacement: directive.Replacement{Tokens: []uint32{1, 2}}, Mode: directive.ModeForget},
	directive.Splice{Session: "s", Start: 4, End: 9, Replacement: directive.Replacement{Text: "[cut]"}},
	directive.Splice{Session: "s", Start: 4, End: 9},
	directive.Splice{Session: "s", Start: 4, End: 9, Recompute: &directive.Recompute{First: 64, Share: 0.15, MaxKL: 0.005}},
	directive.Pin{Session: "s", End: 64, TTL: directive.TTLOf(time.Minute)},
	directive.Retain{Session: "s", Start: 1, End: 64, Priority: 70, Duration: directive.TTLOf(time.Minute)},
	directive.Evict{Session: "s", Start: 10, End: 20, Mode: directive.ModeAmortize},
	directive.Resume{LeaseID: "l1"},
	directive.Share{Session: "s", End: 64, Scope: directive.ScopeGlobal},
}

func TestDirectiveRoundTrip(t *testing.T) {
	seen := map[directive.Verb]bool{}
	for _, d := range allVerbs {
		seen[d.Verb()] = true
		m := DirectiveToProto(d)
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back pb.Directive
		if err := proto.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		got, err := DirectiveFromProto(&back)
		if err != nil || !reflect.DeepEqual(got, d) {
			t.Errorf("%#v -> %v -> %#v, %v", d, m, got, err)
		}
	}
	for _, v := range directive.Verbs {
		if !seen[v] {
			t.Errorf("verb %s not covered", v)
		}
	}
}

func TestTurnRoundTrip(t *testing.T) {
	turn := directive.Turn{ID: "t", Tenant: "acme", Directives: allVerbs}
	got, err := TurnFromApply(TurnToApply(turn), directive.Limits{})
	if err != nil || !reflect.DeepEqual(got, turn) {
		t.Fatalf("got %#v, %v", got, err)
	}
	_, err = TurnFromApply(TurnToApply(turn), directive.Limits{MaxDirectives: 3})
	if !errors.Is(err, errcode.ErrTooMany) {
		t.Fatalf("limit: %v", err)
	}
}

func TestFromProtoRejections(t *testing.T) {
	req := &pb.ApplyRequest{Directives: []*pb.Directive{
		DirectiveToProto(directive.RevokeLease{LeaseID: "l"}),
		{}, // no verb: a newer client's verb, or an empty message
	}}
	_, err := TurnFromApply(req, directive.Limits{})
	if e, ok := errcode.As(err); !ok || e.Code != errcode.UnknownVerb || e.Index != 1 {
		t.Fatalf("empty oneof: %v", err)
	}
	for _, d := range []*durationpb.Duration{{Seconds: -1}, {Seconds: 1 << 40}, {Seconds: 1, Nanos: -5}} {
		m := &pb.Directive{Verb: &pb.Directive_Pin{Pin: &pb.Pin{Session: "s", End: 1, Ttl: d}}}
		if _, err := DirectiveFromProto(m); !errors.Is(err, errcode.ErrInvalidTTL) {
			t.Errorf("ttl %v: %v", d, err)
		}
	}
	m := &pb.Directive{Verb: &pb.Directive_RenewLease{RenewLease: &pb.RenewLease{LeaseId: "l"}}}
	if _, err := DirectiveFromProto(m); !errors.Is(err, errcode.ErrMissingField) {
		t.Errorf("renew without ttl: %v", err)
	}
	if _, err := DirectiveFromProto(nil); !errors.Is(err, errcode.ErrMissingField) {
		t.Errorf("nil: %v", err)
	}
}

func TestReplyRoundTrip(t *testing.T) {
	fail := errcode.New(errcode.UnknownBlock, "hash 9").At(1)
	reply := directive.TurnReply{
		Status: directive.StatusError, TurnID: "t", Error: fail,
		Results: []directive.Result{
			{Index: 0, Verb: directive.VerbCache, Status: directive.StatusError, Error: errcode.New(errcode.TurnAborted, "").At(0)},
			{Index: 1, Verb: directive.VerbPause, Status: directive.StatusError, Error: fail},
		},
	}
	got := ApplyResponseToReply(TurnReplyToProto(reply))
	if !reflect.DeepEqual(got, reply) {
		t.Fatalf("got %#v\nwant %#v", got, reply)
	}
	ok := directive.TurnReply{Status: directive.StatusOK, Results: []directive.Result{{Verb: directive.VerbPause, Status: directive.StatusOK,
		Effect: directive.Effect{Blocks: 3, Skipped: 1, Skips: []directive.Skip{{Reason: directive.SkipLocked, Blocks: 1}}, Missing: 2, Tokens: 7, LeaseID: "l", TTL: directive.TTL(time.Hour)}}}}
	if got := ApplyResponseToReply(TurnReplyToProto(ok)); !reflect.DeepEqual(got, ok) {
		t.Fatalf("got %#v\nwant %#v", got, ok)
	}
}

func TestCacheControlRoundTrip(t *testing.T) {
	c := directive.CacheControl{Action: directive.ActionPinPrefix, TokenIDs: []uint32{1, 2}, TTL: directive.TTLOf(time.Minute), WorkerID: "42"}
	got, tenant, err := CacheControlFromProto(CacheControlToProto(c, "acme"))
	if err != nil || tenant != "acme" || !reflect.DeepEqual(got, c) {
		t.Fatalf("got %#v %q %v", got, tenant, err)
	}
	r := directive.OKReply(directive.ActionUnpinBlocks, 3, "Unpinned 3/3 blocks", "42")
	if back := CacheControlReplyFromProto(CacheControlReplyToProto(r)); !reflect.DeepEqual(back, r) {
		t.Fatalf("reply %#v", back)
	}
	e := directive.ErrorReply(errcode.New(errcode.PinBudgetExhausted, "device"), "42")
	if back := CacheControlReplyFromProto(CacheControlReplyToProto(e)); !reflect.DeepEqual(back, e) {
		t.Fatalf("error reply %#v", back)
	}
}

func TestTiers(t *testing.T) {
	for _, name := range []string{"device", "host", "disk", "remote"} {
		n, err := TierFromProto(TierToProto(name))
		if err != nil || string(n) != name {
			t.Errorf("%s: %s %v", name, n, err)
		}
	}
	if TierToProto("GPU") != pb.Tier_TIER_DEVICE || TierToProto("nope") != pb.Tier_TIER_UNSPECIFIED {
		t.Error("tier aliases")
	}
	if _, err := TierFromProto(pb.Tier_TIER_UNSPECIFIED); !errors.Is(err, errcode.ErrInvalidTier) {
		t.Error("unspecified tier accepted")
	}
}

// A reply's warning (its pins not saved) survives the Control API.
func TestReplyWarningRoundTrip(t *testing.T) {
	r := directive.TurnReply{Status: directive.StatusOK, TurnID: "t", Warning: "not saved"}
	if got := ApplyResponseToReply(TurnReplyToProto(r)); got.Warning != r.Warning || !got.OK() {
		t.Fatalf("got %+v", got)
	}
}
