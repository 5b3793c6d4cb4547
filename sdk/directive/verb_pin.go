package directive

import pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"

// VerbPin is Pin's wire tag.
const VerbPin Verb = "Pin"

// Pin pins the session's prefix [0, End) for TTL (nil: host default).
type Pin struct {
	Session string `json:"session"`
	End     int64  `json:"end"`
	TTL     *TTL   `json:"ttl,omitempty"`
}

var pinDef = define(verbSpec[Pin]{
	span: true,
	toProto: func(d Pin) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Pin{Pin: &pb.Pin{Session: d.Session, End: d.End, Ttl: TTLToProto(d.TTL)}}}
	},
	fromProto: func(m *pb.Directive) (Pin, error) {
		p := m.GetPin()
		t, err := TTLFromProto(p.GetTtl(), "Pin.ttl")
		return Pin{Session: p.GetSession(), End: p.GetEnd(), TTL: t}, err
	},
})

func (Pin) Verb() Verb                     { return VerbPin }
func (Pin) isDirective()                   {}
func (d Pin) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Pin on its own.
func (d Pin) Validate(l Limits) error {
	if err := checkSession("Pin", d.Session); err != nil {
		return err
	}
	return checkSpan("Pin", 0, d.End, false, l)
}
