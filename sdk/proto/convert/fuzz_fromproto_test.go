package convert

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// The gRPC Control server hands whatever proto bytes a socket peer sends
// to these converters. For any bytes that unmarshal: no panic, every
// rejection is a registered error, and an accepted message converts back
// to proto and in again to the same message (the conversion is stable).

func registered(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	e, ok := errcode.As(err)
	if !ok {
		t.Fatalf("%s: %v (%T) is not a registry error", what, err, err)
	}
	if _, ok := errcode.Lookup(e.Code); !ok {
		t.Fatalf("%s: code %q is not registered", what, e.Code)
	}
}

func FuzzTurnFromApply(f *testing.F) {
	seed := directive.Turn{ID: "t1", Tenant: "acme", Directives: allVerbs}
	b, err := proto.Marshal(TurnToApply(seed))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, d := range allVerbs {
		b, err := proto.Marshal(TurnToApply(directive.Turn{ID: "one", Directives: []directive.Directive{d}}))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.ApplyRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		l := directive.Limits{MaxDirectives: 64, SinkTokens: 4}
		turn, err := TurnFromApply(&req, l)
		registered(t, "TurnFromApply", err)
		if err != nil {
			return
		}
		registered(t, "ValidateTurn", directive.ValidateTurn(turn, l))
		back := TurnToApply(turn)
		again, err := TurnFromApply(back, l)
		if err != nil {
			t.Fatalf("accepted turn does not convert back: %v", err)
		}
		if !proto.Equal(TurnToApply(again), back) {
			t.Fatalf("unstable conversion:\n%v\n%v", back, TurnToApply(again))
		}
	})
}

func FuzzDirectiveFromProto(f *testing.F) {
	for _, d := range allVerbs {
		b, err := proto.Marshal(DirectiveToProto(d))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(0), b)
	}
	ttl := directive.TTLOf(time.Minute)
	b, err := proto.Marshal(CacheControlToProto(directive.CacheControl{Action: directive.ActionPinPrefix,
		TokenIDs: []uint32{1, 2, 3, 4}, TTL: ttl, WorkerID: "3"}, "acme"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(byte(1), b)
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		if kind%2 == 1 {
			var m pb.CacheControlRequest
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			c, tenant, err := CacheControlFromProto(&m)
			registered(t, "CacheControlFromProto", err)
			if err != nil {
				return
			}
			registered(t, "CacheControl.Validate", c.Validate(directive.Limits{}))
			c2, tenant2, err := CacheControlFromProto(CacheControlToProto(c, tenant))
			if err != nil || tenant2 != tenant || !proto.Equal(CacheControlToProto(c2, tenant2), CacheControlToProto(c, tenant)) {
				t.Fatalf("unstable cache_control conversion: %v", err)
			}
			return
		}
		var m pb.Directive
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		d, err := DirectiveFromProto(&m)
		registered(t, "DirectiveFromProto", err)
		if err != nil {
			return
		}
		registered(t, "Validate", d.Validate(directive.Limits{SinkTokens: 4}))
		back := DirectiveToProto(d)
		d2, err := DirectiveFromProto(back)
		if err != nil {
			t.Fatalf("accepted directive does not convert back: %v", err)
		}
		if !proto.Equal(DirectiveToProto(d2), back) {
			t.Fatalf("unstable conversion:\n%v\n%v", back, DirectiveToProto(d2))
		}
	})
}
