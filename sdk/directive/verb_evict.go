package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbEvict is Evict's wire tag.
const VerbEvict Verb = "Evict"

// Evict drops [Start, End): a splice with an empty replacement, in Mode
// (ModeDefault: the host's configured mode).
type Evict struct {
	Session string `json:"session"`
	Start   int64  `json:"start" wire:"required"`
	End     int64  `json:"end" wire:"required"`
	Mode    Mode   `json:"mode,omitempty"`
}

var evictDef = define(verbSpec[Evict]{
	span: true,
	toProto: func(d Evict) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Evict{Evict: &pb.Evict{Session: d.Session, Start: d.Start, End: d.End, Mode: string(d.Mode)}}}
	},
	fromProto: func(m *pb.Directive) (Evict, error) {
		e := m.GetEvict()
		return Evict{Session: e.GetSession(), Start: e.GetStart(), End: e.GetEnd(), Mode: Mode(e.GetMode())}, nil
	},
})

func (Evict) Verb() Verb                     { return VerbEvict }
func (Evict) isDirective()                   {}
func (d Evict) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Evict on its own.
func (d Evict) Validate(l Limits) error {
	if err := checkSession("Evict", d.Session); err != nil {
		return err
	}
	if err := checkSpan("Evict", d.Start, d.End, false, l); err != nil {
		return err
	}
	return checkMode("Evict", d.Mode)
}
