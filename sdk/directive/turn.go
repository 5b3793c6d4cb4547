package directive

import (
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Turn is the unit the host applies all or none: the directives one sender
// issued together, in order.
type Turn struct {
	ID         string      `json:"id,omitempty"`     // optional, for the audit log and deduplication
	Source     string      `json:"source,omitempty"` // who sent it, as the transport verified
	Tenant     string      `json:"tenant,omitempty"` // whose blocks it may touch ("" = the default tenant)
	Directives []Directive `json:"directives"`
}

// MaxNameLen bounds Turn.ID, Source and Tenant.
const MaxNameLen = 256

// TurnError reports why a turn was refused. Err is the turn's answer: the
// first failing directive's error (with its Index), or a whole-turn error
// (Index -1). Each holds one entry per directive, nil where that directive
// was valid on its own; it is nil when the failure is about the whole turn.
type TurnError struct {
	Err  *errcode.Error
	Each []*errcode.Error
}

func (e *TurnError) Error() string { return e.Err.Error() }
func (e *TurnError) Unwrap() error { return e.Err }

// ValidateTurn checks every directive on its own and the turn's joint rules:
//
//   - at least one directive and at most Limits.MaxDirectives;
//   - edits (Splice, Evict) start at or after Limits.SinkTokens;
//   - within a session, no two edits overlap, and no Pin, Retain or Share
//     overlaps an edit (its positions would shift under it mid-turn);
//   - no lease id is paused twice.
//
// It returns nil or a *TurnError.
func ValidateTurn(t Turn, l Limits) error {
	switch {
	case len(t.Directives) == 0:
		return &TurnError{Err: errcode.New(errcode.MissingField, "turn has no directives")}
	case len(t.Directives) > l.maxDirectives():
		return &TurnError{Err: errcode.New(errcode.TooMany, "%d directives in one turn, limit %d", len(t.Directives), l.maxDirectives())}
	}
	for _, f := range []struct{ name, v string }{{"id", t.ID}, {"source", t.Source}, {"tenant", t.Tenant}} {
		if len(f.v) > MaxNameLen || !printable(f.v) {
			return &TurnError{Err: errcode.New(errcode.BadRequest, "turn %s %s: want at most %d printable characters", f.name, quoteShort(f.v), MaxNameLen)}
		}
	}

	// each is made at the first failure: a valid turn allocates nothing
	// for it.
	var each []*errcode.Error
	var first *errcode.Error
	fail := func(i int, err error) {
		if each == nil {
			each = make([]*errcode.Error, len(t.Directives))
		}
		if each[i] != nil {
			return
		}
		e := errcode.From(err).At(i)
		each[i] = e
		if first == nil || i < first.Index {
			first = e
		}
	}

	spans := make([]span, 0, len(t.Directives))
	leases := map[string]int{}
	for i, d := range t.Directives {
		if d == nil {
			fail(i, errcode.New(errcode.BadRequest, "nil directive"))
			continue
		}
		if err := d.Validate(l); err != nil {
			fail(i, err)
			continue
		}
		if p, ok := d.(Pause); ok {
			if j, dup := leases[p.LeaseID]; dup {
				fail(i, errcode.New(errcode.LeaseExists, "lease_id %s is paused by directives %d and %d", quoteShort(p.LeaseID), j, i))
				continue
			}
			leases[p.LeaseID] = i
		}
		if s, ok := spanOf(d); ok {
			s.index = i
			if s.edit && s.start < l.SinkTokens {
				fail(i, errcode.New(errcode.SinkProtected, "%s at %d: the first %d tokens are protected", d.Verb(), s.start, l.SinkTokens))
				continue
			}
			spans = append(spans, s)
		}
	}
	// Pairwise: turns are small (MaxDirectives), and sorting would not
	// simplify the insertion cases.
	for a := 0; a < len(spans); a++ {
		for b := a + 1; b < len(spans); b++ {
			x, y := spans[a], spans[b]
			if x.session != y.session || (!x.edit && !y.edit) || !x.overlaps(y) {
				continue
			}
			fail(y.index, errcode.New(errcode.OverlappingSpans, "session %s: %s [%d, %d) (directive %d) and %s [%d, %d) (directive %d)",
				quoteShort(x.session), x.verb, x.start, x.end, x.index, y.verb, y.start, y.end, y.index))
		}
	}
	if first != nil {
		return &TurnError{Err: first, Each: each}
	}
	return nil
}

// span is a directive's footprint on a session's token positions.
type span struct {
	session    string
	verb       Verb
	start, end int64
	edit       bool // changes positions (Splice, Evict)
	index      int
}

func spanOf(d Directive) (span, bool) {
	switch d := d.(type) {
	case Splice:
		return span{session: d.Session, verb: VerbSplice, start: d.Start, end: d.End, edit: true}, true
	case Evict:
		return span{session: d.Session, verb: VerbEvict, start: d.Start, end: d.End, edit: true}, true
	case Pin:
		return span{session: d.Session, verb: VerbPin, start: 0, end: d.End}, true
	case Retain:
		return span{session: d.Session, verb: VerbRetain, start: d.Start, end: d.End}, true
	case Share:
		return span{session: d.Session, verb: VerbShare, start: 0, end: d.End}, true
	}
	return span{}, false
}

// overlaps: two ranges overlap when they share a position; an insertion
// point (start == end) overlaps a range strictly containing it and another
// insertion at the same point (their order would be ambiguous).
func (s span) overlaps(o span) bool {
	switch {
	case s.start == s.end && o.start == o.end:
		return s.start == o.start
	case s.start == s.end:
		return o.start < s.start && s.start < o.end
	case o.start == o.end:
		return s.start < o.start && o.start < s.end
	}
	return max(s.start, o.start) < min(s.end, o.end)
}

// String lists the turn's verbs, for logs.
func (t Turn) String() string {
	vs := make([]string, len(t.Directives))
	for i, d := range t.Directives {
		if d == nil {
			vs[i] = "<nil>"
			continue
		}
		vs[i] = string(d.Verb())
	}
	return "turn[" + strings.Join(vs, ",") + "]"
}

// UnmarshalJSON decodes any DecodeTurn form with default Limits, so a Turn
// can sit inside other JSON documents.
func (t *Turn) UnmarshalJSON(b []byte) error {
	v, err := DecodeTurn(b, Limits{})
	if err != nil {
		return err
	}
	*t = v
	return nil
}
