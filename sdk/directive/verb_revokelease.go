package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbRevokeLease is RevokeLease's wire tag.
const VerbRevokeLease Verb = "RevokeLease"

// RevokeLease ends a lease and purges its blocks from every tier.
type RevokeLease struct {
	LeaseID string `json:"lease_id"`
}

var revokeLeaseDef = define(verbSpec[RevokeLease]{
	toProto: func(d RevokeLease) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_RevokeLease{RevokeLease: &pb.RevokeLease{LeaseId: d.LeaseID}}}
	},
	fromProto: func(m *pb.Directive) (RevokeLease, error) {
		return RevokeLease{LeaseID: m.GetRevokeLease().GetLeaseId()}, nil
	},
})

func (RevokeLease) Verb() Verb                     { return VerbRevokeLease }
func (RevokeLease) isDirective()                   {}
func (d RevokeLease) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks RevokeLease on its own.
func (d RevokeLease) Validate(Limits) error { return checkLeaseID("RevokeLease", d.LeaseID) }
