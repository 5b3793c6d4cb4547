package pluginwire

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/policy"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

// FuzzDecodeReply feeds the host side of the plugin protocol whatever a
// plugin process can answer: any proto bytes for a Reply. For any input:
// no panic; either an error and no directives (a turn is all or none), or
// directives that each pass DecodeCommand's checks with tenants parallel
// to them. Replies in the typed form and in older SDKs' JSON form are both
// seeded.
func FuzzDecodeReply(f *testing.F) {
	ttl := directive.TTLOf(time.Minute)
	seeds := [][]policy.Directive{
		{directive.Cache{BlockHashes: []directive.Hash{1, 2}, Pin: true, TTL: ttl}},
		{directive.Splice{Session: "s", Start: 4, End: 9, Replacement: directive.Replacement{Text: "[cut]"}}, policy.WithTenant("b", directive.Pin{Session: "s", End: 64})},
		{policy.WithTenant("a", directive.Pause{BlockHashes: []directive.Hash{4}, LeaseID: "l"}), directive.RevokeLease{LeaseID: "l"}},
	}
	for _, ds := range seeds {
		f.Add(seedReply(f, ds, false))
		f.Add(seedReply(f, ds, true))
	}
	b, _ := proto.Marshal(&pb.Reply{Error: "policy failed"})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep pb.Reply
		if proto.Unmarshal(data, &rep) != nil {
			return
		}
		res := decodeReply(&rep)
		if res.Err != nil {
			if len(res.Directives) != 0 || res.Tenants != nil {
				t.Fatalf("an error reply kept %d directives", len(res.Directives))
			}
			return
		}
		if res.Tenants != nil && len(res.Tenants) != len(res.Directives) {
			t.Fatalf("%d tenants for %d directives", len(res.Tenants), len(res.Directives))
		}
		for i, d := range res.Directives {
			if d == nil {
				t.Fatalf("directive %d is nil", i)
			}
			if again, err := replyDirective(&rep, i); err != nil || again.Verb() != d.Verb() {
				t.Fatalf("directive %d accepted but does not decode again: %v", i, err)
			}
		}
	})
}

// seedReply encodes directives as a plugin answers them, typed (or, with
// legacy, as JSON objects the way older SDKs did), with tenants parallel to
// them when any is scoped.
func seedReply(f *testing.F, ds []policy.Directive, legacy bool) []byte {
	r := &pb.Reply{}
	tenants, scoped := make([]string, len(ds)), false
	for i, d := range ds {
		tenants[i], d = policy.Unwrap(d)
		scoped = scoped || tenants[i] != ""
		if !legacy {
			r.Directives = append(r.Directives, directive.ToProto(d))
			continue
		}
		b, err := json.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		r.DirectivesJson = append(r.DirectivesJson, b)
	}
	if scoped {
		r.Tenants = tenants
	}
	b, err := proto.Marshal(r)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
