package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbRetain is Retain's wire tag.
const VerbRetain Verb = "Retain"

// Retain soft-pins [Start, End) with Priority 0..100 for Duration (nil: host
// default). Eviction takes lower priorities first.
type Retain struct {
	Session  string `json:"session"`
	Start    int64  `json:"start" wire:"required"`
	End      int64  `json:"end" wire:"required"`
	Priority int    `json:"priority" wire:"required"`
	Duration *TTL   `json:"duration,omitempty"`
}

var retainDef = define(verbSpec[Retain]{
	span: true,
	toProto: func(d Retain) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Retain{Retain: &pb.Retain{Session: d.Session, Start: d.Start, End: d.End, Priority: int32(d.Priority), Duration: TTLToProto(d.Duration)}}}
	},
	fromProto: func(m *pb.Directive) (Retain, error) {
		r := m.GetRetain()
		t, err := TTLFromProto(r.GetDuration(), "Retain.duration")
		return Retain{Session: r.GetSession(), Start: r.GetStart(), End: r.GetEnd(), Priority: int(r.GetPriority()), Duration: t}, err
	},
})

func (Retain) Verb() Verb                     { return VerbRetain }
func (Retain) isDirective()                   {}
func (d Retain) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Retain on its own.
func (d Retain) Validate(l Limits) error {
	if err := checkSession("Retain", d.Session); err != nil {
		return err
	}
	if err := checkSpan("Retain", d.Start, d.End, false, l); err != nil {
		return err
	}
	if d.Priority < 0 || d.Priority > 100 {
		return errcode.New(errcode.InvalidPriority, "Retain.priority %d", d.Priority)
	}
	return nil
}
