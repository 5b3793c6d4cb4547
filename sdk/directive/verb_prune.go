package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbPrune is Prune's wire tag.
const VerbPrune Verb = "Prune"

// Prune evicts every descendant of a block from every tier, keeping the
// block itself. Locked pages are skipped and counted.
type Prune struct {
	AfterBlockHash Hash `json:"after_block_hash" wire:"required"`
}

var pruneDef = define(verbSpec[Prune]{
	toProto: func(d Prune) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Prune{Prune: &pb.Prune{AfterBlockHash: uint64(d.AfterBlockHash)}}}
	},
	fromProto: func(m *pb.Directive) (Prune, error) {
		return Prune{AfterBlockHash: Hash(m.GetPrune().GetAfterBlockHash())}, nil
	},
})

func (Prune) Verb() Verb                     { return VerbPrune }
func (Prune) isDirective()                   {}
func (d Prune) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Prune on its own (any 64-bit value is a possible hash).
func (d Prune) Validate(Limits) error { return nil }
