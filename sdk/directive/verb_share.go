package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbShare is Share's wire tag.
const VerbShare Verb = "Share"

// Share publishes the session's prefix [0, End) to the shared remote tier so
// other workers can fetch it, visible within Scope (ScopeTenant by default).
type Share struct {
	Session string `json:"session"`
	End     int64  `json:"end"`
	Scope   Scope  `json:"scope,omitempty"`
}

var shareDef = define(verbSpec[Share]{
	span: true,
	toProto: func(d Share) *pb.Directive {
		return &pb.Directive{Verb: &pb.Directive_Share{Share: &pb.Share{Session: d.Session, End: d.End, Scope: string(d.Scope)}}}
	},
	fromProto: func(m *pb.Directive) (Share, error) {
		s := m.GetShare()
		return Share{Session: s.GetSession(), End: s.GetEnd(), Scope: Scope(s.GetScope())}, nil
	},
})

func (Share) Verb() Verb                     { return VerbShare }
func (Share) isDirective()                   {}
func (d Share) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Share on its own.
func (d Share) Validate(l Limits) error {
	if err := checkSession("Share", d.Session); err != nil {
		return err
	}
	if err := checkSpan("Share", 0, d.End, false, l); err != nil {
		return err
	}
	switch d.Scope {
	case "", ScopeTenant, ScopeGlobal:
		return nil
	}
	return errcode.New(errcode.BadRequest, "Share.scope %s: want tenant or global", quoteShort(string(d.Scope)))
}
