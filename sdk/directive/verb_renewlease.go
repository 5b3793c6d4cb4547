package directive

import (
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbRenewLease is RenewLease's wire tag.
const VerbRenewLease Verb = "RenewLease"

// RenewLease sets an existing lease's TTL to NewTTL from now.
type RenewLease struct {
	LeaseID string `json:"lease_id"`
	NewTTL  TTL    `json:"new_ttl_seconds" wire:"required"`
}

var renewLeaseDef = define(verbSpec[RenewLease]{
	toProto: func(d RenewLease) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_RenewLease{RenewLease: &pb.RenewLease{LeaseId: d.LeaseID, NewTtl: durationpb.New(d.NewTTL.Duration())}}}
	},
	fromProto: func(m *pb.Directive) (RenewLease, error) {
		r := m.GetRenewLease()
		if r.GetNewTtl() == nil {
			return RenewLease{}, errcode.New(errcode.MissingField, "RenewLease.new_ttl")
		}
		t, err := TTLFromProto(r.GetNewTtl(), "RenewLease.new_ttl")
		if err != nil {
			return RenewLease{}, err
		}
		return RenewLease{LeaseID: r.GetLeaseId(), NewTTL: *t}, nil
	},
})

func (RenewLease) Verb() Verb                     { return VerbRenewLease }
func (RenewLease) isDirective()                   {}
func (d RenewLease) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks RenewLease on its own.
func (d RenewLease) Validate(Limits) error { return checkLeaseID("RenewLease", d.LeaseID) }
