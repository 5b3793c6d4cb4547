package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbWarm is Warm's wire tag.
const VerbWarm Verb = "Warm"

// Warm fetches blocks from a colder tier (disk, remote) into TargetTier.
// Keys that name no block are counted as missing, not refused.
type Warm struct {
	BlockKeys  []BlockKey `json:"block_keys"`
	TargetTier string     `json:"target_tier"` // see ParseTierName
}

var warmDef = define(verbSpec[Warm]{
	toProto: func(d Warm) *pb.Directive {
		keys := make([]string, len(d.BlockKeys))
		for i, k := range d.BlockKeys {
			keys[i] = string(k)
		}
		return &pb.Directive{Verb: &pb.Directive_Warm{Warm: &pb.Warm{BlockKeys: keys, TargetTier: d.TargetTier}}}
	},
	fromProto: func(m *pb.Directive) (Warm, error) {
		w := m.GetWarm()
		keys := make([]BlockKey, len(w.GetBlockKeys()))
		for i, k := range w.GetBlockKeys() {
			keys[i] = BlockKey(k)
		}
		return Warm{BlockKeys: keys, TargetTier: w.GetTargetTier()}, nil
	},
})

func (Warm) Verb() Verb                     { return VerbWarm }
func (Warm) isDirective()                   {}
func (d Warm) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Warm on its own.
func (d Warm) Validate(l Limits) error {
	if len(d.BlockKeys) == 0 {
		return errcode.New(errcode.MissingField, "Warm.block_keys is empty")
	}
	if len(d.BlockKeys) > l.maxHashes() {
		return errcode.New(errcode.TooMany, "Warm: %d block_keys, limit %d", len(d.BlockKeys), l.maxHashes())
	}
	for i, k := range d.BlockKeys {
		if err := k.validate(); err != nil {
			e, _ := errcode.As(err)
			e.Detail = "Warm.block_keys[" + itoa(i) + "]: " + e.Detail
			return e
		}
	}
	if d.TargetTier == "" {
		return errcode.New(errcode.MissingField, "Warm.target_tier")
	}
	if _, err := ParseTierName(d.TargetTier); err != nil {
		return err
	}
	return nil
}
