package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbThink is Think's wire tag.
const VerbThink Verb = "Think"

// Think marks blocks transient (never backed up) when Transient is true, and
// purges them at once when it is false. Purging an interior span is a splice
// with an empty replacement.
type Think struct {
	BlockHashes []Hash `json:"block_hashes"`
	Transient   bool   `json:"transient" wire:"required"`
}

var thinkDef = define(verbSpec[Think]{
	toProto: func(d Think) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Think{Think: &pb.Think{BlockHashes: hashesToProto(d.BlockHashes), Transient: d.Transient}}}
	},
	fromProto: func(m *pb.Directive) (Think, error) {
		t := m.GetThink()
		return Think{BlockHashes: hashesFromProto(t.GetBlockHashes()), Transient: t.GetTransient()}, nil
	},
})

func (Think) Verb() Verb                     { return VerbThink }
func (Think) isDirective()                   {}
func (d Think) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Think on its own.
func (d Think) Validate(l Limits) error { return checkHashes("Think", d.BlockHashes, l) }
