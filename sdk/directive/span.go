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
