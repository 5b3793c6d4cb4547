package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbResume is Resume's wire tag.
const VerbResume Verb = "Resume"

// Resume brings a paused lease's blocks back to a hot tier and ends the lease.
type Resume struct {
	LeaseID string `json:"lease_id"`
}

var resumeDef = define(verbSpec[Resume]{
	span: true,
	toProto: func(d Resume) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Resume{Resume: &pb.Resume{LeaseId: d.LeaseID}}}
	},
	fromProto: func(m *pb.Directive) (Resume, error) {
		return Resume{LeaseID: m.GetResume().GetLeaseId()}, nil
	},
})

func (Resume) Verb() Verb                     { return VerbResume }
func (Resume) isDirective()                   {}
func (d Resume) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Resume on its own.
func (d Resume) Validate(Limits) error { return checkLeaseID("Resume", d.LeaseID) }
