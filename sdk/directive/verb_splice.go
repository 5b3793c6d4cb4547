package directive

import (
	"math"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// VerbSplice is Splice's wire tag.
const VerbSplice Verb = "Splice"

// Splice replaces [Start, End) with Replacement. Start ==
// End with a non-empty replacement inserts. Recompute, when set, asks for
// some of the tokens the splice keeps to be prefilled again with the
// edited context (amortize mode only; it overrides the host's
// splice.recompute and splice.max_kl for this session's splice).
type Splice struct {
	Session     string      `json:"session"`
	Start       int64       `json:"start" wire:"required"`
	End         int64       `json:"end" wire:"required"`
	Replacement Replacement `json:"replacement"`
	Mode        Mode        `json:"mode,omitempty"`
	Recompute   *Recompute  `json:"recompute,omitempty"`
}

// Recompute says which kept tokens a splice prefills again. An amortized
// token keeps the K/V its first prefill computed, which attended to the
// removed text: recomputing it brings the cache closer to a re-prefill of
// the edited sequence, at the cost of prefilling it.
type Recompute struct {
	// First recomputes the first First tokens after each edit.
	First int64 `json:"first,omitempty"`
	// Share recomputes that fraction (0..1) of the kept tokens after the
	// first edit, those the engine's staleness signal ranks first.
	Share float64 `json:"share,omitempty"`
	// MaxKL is the quality guard's budget: the engine estimates the mean KL
	// divergence per token the splice leaves, against a re-prefill, and
	// recomputes what it takes to stay within it (all of the kept tokens
	// when nothing less will do). 0: no guard.
	MaxKL float64 `json:"max_kl,omitempty"`
}

// Empty reports whether r asks for nothing.
func (r *Recompute) Empty() bool { return r == nil || (r.First == 0 && r.Share == 0 && r.MaxKL == 0) }

// Validate checks the ranges of r's fields; what names the directive.
func (r *Recompute) Validate(what string) error {
	switch {
	case r == nil:
		return nil
	case r.First < 0:
		return errcode.New(errcode.BadRequest, "%s.first %d: want a token count >= 0", what, r.First)
	case math.IsNaN(r.Share) || r.Share < 0 || r.Share > 1:
		return errcode.New(errcode.BadRequest, "%s.share %v: want a fraction in 0..1", what, r.Share)
	case math.IsNaN(r.MaxKL) || r.MaxKL < 0 || math.IsInf(r.MaxKL, 0):
		return errcode.New(errcode.BadRequest, "%s.max_kl %v: want a KL budget >= 0 (nats per token)", what, r.MaxKL)
	}
	return nil
}

var spliceDef = define(verbSpec[Splice]{
	span: true,
	toProto: func(d Splice) *pb.Directive {
		var r *pb.Replacement
		if !d.Replacement.Empty() {
			r = &pb.Replacement{Tokens: d.Replacement.Tokens, Text: d.Replacement.Text}
		}
		return &pb.Directive{Verb: &pb.Directive_Splice{Splice: &pb.Splice{Session: d.Session, Start: d.Start, End: d.End, Replacement: r, Mode: string(d.Mode), Recompute: recomputeToProto(d.Recompute)}}}
	},
	fromProto: func(m *pb.Directive) (Splice, error) {
		s := m.GetSplice()
		r := Replacement{Tokens: s.GetReplacement().GetTokens(), Text: s.GetReplacement().GetText()}
		return Splice{Session: s.GetSession(), Start: s.GetStart(), End: s.GetEnd(), Replacement: r, Mode: Mode(s.GetMode()), Recompute: recomputeFromProto(s.GetRecompute())}, nil
	},
})

func recomputeToProto(r *Recompute) *pb.Recompute {
	if r == nil {
		return nil
	}
	return &pb.Recompute{First: r.First, Share: r.Share, MaxKl: r.MaxKL}
}

func recomputeFromProto(m *pb.Recompute) *Recompute {
	if m == nil {
		return nil
	}
	return &Recompute{First: m.GetFirst(), Share: m.GetShare(), MaxKL: m.GetMaxKl()}
}

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
	if err := d.Recompute.Validate("Splice.recompute"); err != nil {
		return err
	}
	if !d.Recompute.Empty() && d.Mode == ModeForget {
		return errcode.New(errcode.BadRequest, "Splice.recompute with mode forget: forget re-prefills everything after the edit already; drop one of them")
	}
	return checkMode("Splice", d.Mode)
}
