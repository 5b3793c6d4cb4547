package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbPause is Pause's wire tag.
const VerbPause Verb = "Pause"

// Pause copies blocks to the pause tier, frees their hotter copies and
// records lease LeaseID. A nil TTL is an indefinite lease (the command's null).
type Pause struct {
	BlockHashes []Hash `json:"block_hashes"`
	TTL         *TTL   `json:"ttl_seconds"`
	LeaseID     string `json:"lease_id"`
}

var pauseDef = define(verbSpec[Pause]{
	toProto: func(d Pause) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Pause{Pause: &pb.Pause{BlockHashes: hashesToProto(d.BlockHashes), Ttl: TTLToProto(d.TTL), LeaseId: d.LeaseID}}}
	},
	fromProto: func(m *pb.Directive) (Pause, error) {
		p := m.GetPause()
		t, err := TTLFromProto(p.GetTtl(), "Pause.ttl")
		return Pause{BlockHashes: hashesFromProto(p.GetBlockHashes()), TTL: t, LeaseID: p.GetLeaseId()}, err
	},
})

func (Pause) Verb() Verb                     { return VerbPause }
func (Pause) isDirective()                   {}
func (d Pause) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Pause on its own.
func (d Pause) Validate(l Limits) error {
	if err := checkHashes("Pause", d.BlockHashes, l); err != nil {
		return err
	}
	return checkLeaseID("Pause", d.LeaseID)
}
