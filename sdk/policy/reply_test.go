package policy

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/directive"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/plugin/v1"
)

type pinner struct{}

func (pinner) Info() Info                      { return Info{Name: "pinner"} }
func (pinner) Configure(json.RawMessage) error { return nil }
func (pinner) Observe(context.Context, Observation) ([]Directive, error) {
	return []Directive{directive.Pin{Session: "s", End: 64}}, nil
}

// A host that asks for typed directives gets them; a host from before them
// does not ask, and gets each directive's JSON, which it can read.
func TestReplyFormFollowsTheHost(t *testing.T) {
	for _, typed := range []bool{true, false} {
		s := newServer(pinner{}, nil)
		ctx := context.Background()
		if _, err := s.Info(ctx, &pb.InfoRequest{HostApiVersions: []uint32{APIVersion}, TypedDirectives: typed}); err != nil {
			t.Fatal(err)
		}
		obs := &pb.Observation{Seq: 1, Body: &pb.Observation_Tick{Tick: &pb.Tick{}}}
		r, err := s.Observe(ctx, &pb.ObserveRequest{Observations: []*pb.Observation{obs}})
		if err != nil {
			t.Fatal(err)
		}
		rep := r.GetReplies()[0]
		if typed && (len(rep.GetDirectives()) != 1 || len(rep.GetDirectivesJson()) != 0) {
			t.Fatalf("typed host got %v", rep)
		}
		if !typed && (len(rep.GetDirectives()) != 0 || len(rep.GetDirectivesJson()) != 1) {
			t.Fatalf("older host got %v", rep)
		}
	}
}
