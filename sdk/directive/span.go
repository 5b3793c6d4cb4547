package directive

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Span verbs address a session's current cached token sequence by position:
// [Start, End) counts tokens from 0. Their JSON follows the block verbs:
//
//	{"type":"Splice","session":"s1","start":120,"end":480,"replacement":"[trimmed]","mode":"amortize"}
//	{"type":"Evict","session":"s1","start":900,"end":1400}
//	{"type":"Pin","session":"s1","end":2048,"ttl":"10m"}
//	{"type":"Retain","session":"s1","start":0,"end":4096,"priority":80,"duration":600}
//	{"type":"Resume","lease_id":"session-abc"}
//	{"type":"Share","session":"s1","end":2048,"scope":"tenant"}

// Splice replaces [Start, End) with Replacement. Start ==
// End with a non-empty replacement inserts.
type Splice struct {
	Session     string      `json:"session"`
	Start       int64       `json:"start"`
	End         int64       `json:"end"`
	Replacement Replacement `json:"replacement"`
	Mode        Mode        `json:"mode,omitempty"`
}

// Pin pins the session's prefix [0, End) for TTL (nil: host default).
type Pin struct {
	Session string `json:"session"`
	End     int64  `json:"end"`
	TTL     *TTL   `json:"ttl,omitempty"`
}

// Retain soft-pins [Start, End) with Priority 0..100 for Duration (nil: host
// default). Eviction takes lower priorities first.
type Retain struct {
	Session  string `json:"session"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
	Priority int    `json:"priority"`
	Duration *TTL   `json:"duration,omitempty"`
}

// Evict drops [Start, End): a splice with an empty replacement, in Mode
// (ModeDefault: the host's configured mode).
type Evict struct {
	Session string `json:"session"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Mode    Mode   `json:"mode,omitempty"`
}

// Resume brings a paused lease's blocks back to a hot tier and ends the lease.
type Resume struct {
	LeaseID string `json:"lease_id"`
}

// Share publishes the session's prefix [0, End) to the shared remote tier so
// other workers can fetch it, visible within Scope (ScopeTenant by default).
type Share struct {
	Session string `json:"session"`
	End     int64  `json:"end"`
	Scope   Scope  `json:"scope,omitempty"`
}

func (Splice) Verb() Verb { return VerbSplice }
func (Pin) Verb() Verb    { return VerbPin }
func (Retain) Verb() Verb { return VerbRetain }
func (Evict) Verb() Verb  { return VerbEvict }
func (Resume) Verb() Verb { return VerbResume }
func (Share) Verb() Verb  { return VerbShare }

func (Splice) isDirective() {}
func (Pin) isDirective()    {}
func (Retain) isDirective() {}
func (Evict) isDirective()  {}
func (Resume) isDirective() {}
func (Share) isDirective()  {}

// Replacement is what a splice puts in place of its span: tokens, text
// (tokenized by the engine), or nothing. On the wire it is null/absent
// (empty), a JSON array of token ids, a JSON string of text, or an object
// {"tokens":[...]} or {"text":"..."}; it is written back as the object.
type Replacement struct {
	Tokens []uint32 `json:"tokens,omitempty"`
	Text   string   `json:"text,omitempty"`
}

// Empty reports whether the replacement removes the span without a substitute.
func (r Replacement) Empty() bool { return len(r.Tokens) == 0 && r.Text == "" }

// UnmarshalJSON accepts the four forms described on Replacement.
func (r *Replacement) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*r = Replacement{}
		return nil
	case b[0] == '[':
		var toks []uint32
		if err := json.Unmarshal(b, &toks); err != nil {
			return errcode.Wrap(errcode.BadRequest, err, "replacement: want token ids (u32)")
		}
		*r = Replacement{Tokens: toks}
		return nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errcode.Wrap(errcode.BadRequest, err, "replacement")
		}
		*r = Replacement{Text: s}
		return nil
	case b[0] == '{':
		type plain Replacement
		var p plain
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return errcode.Wrap(errcode.BadRequest, err, "replacement: want {\"tokens\":[...]} or {\"text\":\"...\"}")
		}
		if len(p.Tokens) > 0 && p.Text != "" {
			return errcode.New(errcode.BadRequest, "replacement: set tokens or text, not both")
		}
		*r = Replacement(p)
		return nil
	}
	return errcode.New(errcode.BadRequest, "replacement %s: want null, token ids, text, or an object", quoteShort(string(b)))
}

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

// Validate checks Pin on its own.
func (d Pin) Validate(l Limits) error {
	if err := checkSession("Pin", d.Session); err != nil {
		return err
	}
	return checkSpan("Pin", 0, d.End, false, l)
}

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

// Validate checks Resume on its own.
func (d Resume) Validate(Limits) error { return checkLeaseID("Resume", d.LeaseID) }

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

// MaxSessionLen bounds a session id.
const MaxSessionLen = 256

func checkSession(verb, s string) error {
	switch {
	case s == "":
		return errcode.New(errcode.MissingField, "%s.session", verb)
	case len(s) > MaxSessionLen || !printable(s):
		return errcode.New(errcode.BadRequest, "%s.session %s: want at most %d printable characters", verb, quoteShort(s), MaxSessionLen)
	}
	return nil
}

// checkSpan enforces 0 <= start <= end <= MaxPosition, and a non-empty span
// unless the directive inserts.
func checkSpan(verb string, start, end int64, inserts bool, l Limits) error {
	switch {
	case start < 0 || end < 0:
		return errcode.New(errcode.InvalidSpan, "%s [%d, %d): negative position", verb, start, end)
	case start > end:
		return errcode.New(errcode.InvalidSpan, "%s [%d, %d): start after end", verb, start, end)
	case end > l.maxPosition():
		return errcode.New(errcode.InvalidSpan, "%s [%d, %d): end beyond %d", verb, start, end, l.maxPosition())
	case start == end && !inserts:
		return errcode.New(errcode.InvalidSpan, "%s [%d, %d): empty span", verb, start, end)
	}
	return nil
}

func checkMode(verb string, m Mode) error {
	switch m {
	case ModeDefault, ModeAmortize, ModeForget:
		return nil
	}
	return errcode.New(errcode.BadRequest, "%s.mode %s: want amortize or forget", verb, quoteShort(string(m)))
}

// printableText allows newlines and tabs (replacement text is prompt text)
// but requires valid UTF-8.
func printableText(s string) bool { return utf8.ValidString(s) }

// MarshalJSON writes null for an empty replacement and the object otherwise.
func (r Replacement) MarshalJSON() ([]byte, error) {
	if r.Empty() {
		return []byte("null"), nil
	}
	type plain Replacement
	return json.Marshal(plain(r))
}
