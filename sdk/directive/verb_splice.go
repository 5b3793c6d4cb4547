package directive

import (
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbSplice is Splice's wire tag.
const VerbSplice Verb = "Splice"

// Splice replaces [Start, End) with Replacement. Start ==
// End with a non-empty replacement inserts.
type Splice struct {
	Session     string      `json:"session"`
	Start       int64       `json:"start" wire:"required"`
	End         int64       `json:"end" wire:"required"`
	Replacement Replacement `json:"replacement"`
	Mode        Mode        `json:"mode,omitempty"`
}

var spliceDef = define(verbSpec[Splice]{
	span: true,
	toProto: func(d Splice) *pb.Directive {
		var r *pb.Replacement
		if !d.Replacement.Empty() {
			r = &pb.Replacement{Tokens: d.Replacement.Tokens, Text: d.Replacement.Text}
		}
		return &pb.Directive{Verb: &pb.Directive_Splice{Splice: &pb.Splice{Session: d.Session, Start: d.Start, End: d.End, Replacement: r, Mode: string(d.Mode)}}}
	},
	fromProto: func(m *pb.Directive) (Splice, error) {
		s := m.GetSplice()
		r := Replacement{Tokens: s.GetReplacement().GetTokens(), Text: s.GetReplacement().GetText()}
		return Splice{Session: s.GetSession(), Start: s.GetStart(), End: s.GetEnd(), Replacement: r, Mode: Mode(s.GetMode())}, nil
	},
})

func (Splice) Verb() Verb                     { return VerbSplice }
func (Splice) isDirective()                   {}
func (d Splice) MarshalJSON() ([]byte, error) { return encodeAs(d) }

// Validate checks Splice on its own.
func (d Splice) Validate(l Limits) error {
	if err := checkSession("Splice", d.Session); err != nil {
		return err
	}
	if err := checkSpan("Splice", d.Start, d.End, !d.Replacement.Empty(), l); err != nil {
		return err
	}
	if len(d.Replacement.Tokens) > l.maxTokens() || len(d.Replacement.Text) > l.maxTokens()*4 {
		return errcode.New(errcode.TooMany, "Splice.replacement exceeds %d tokens", l.maxTokens())
	}
	if len(d.Replacement.Tokens) > 0 && d.Replacement.Text != "" {
		return errcode.New(errcode.BadRequest, "Splice.replacement: set tokens or text, not both")
	}
	if d.Replacement.Text != "" && !printableText(d.Replacement.Text) {
		return errcode.New(errcode.BadRequest, "Splice.replacement.text is not valid UTF-8")
	}
	return checkMode("Splice", d.Mode)
}
