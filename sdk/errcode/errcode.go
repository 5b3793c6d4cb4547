// Package errcode is the registry of every error a kvpilot client can see.
//
// Each error has a stable string code ("unknown_block"), a stable number
// (2001), the gRPC status code it travels under, a fixed message and a hint
// that tells the client what it can do about it. The whole table lives in
// one data file, errors.json; go generate renders it as registry_gen.go and
// as the Python SDK's classes, so a code is written once, never reused with
// another meaning, and clients in other languages can switch on it. Free-form context (which hash, which
// directive) goes into Error.Detail, never into the message.
//
// Sentinels (ErrUnknownBlock, ...) work with errors.Is: an *Error matches a
// sentinel of the same code, whatever its detail or wrapped cause.
package errcode

//go:generate go run ./internal/errgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Code is the stable string identifier of a registry error.
type Code string

// Entry is one row of the registry.
type Entry struct {
	Code    Code
	Number  uint16
	GRPC    uint32 // the gRPC status code value it travels under
	Message string // what went wrong, without specifics
	Hint    string // what the client can do
}

// Error is a registry error with context. The zero Index is meaningful (the
// first directive of a turn), so "no directive" is -1; New sets it so.
type Error struct {
	Code   Code
	Detail string // specifics: the hash, the field, the limit
	Index  int    // directive index within its turn, -1 when not about one directive
	Err    error  // cause, if any
}

// New returns an error with the given code and a formatted detail.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...), Index: -1}
}

// Wrap returns an error with the given code whose detail is formatted and
// whose cause is err (kept for errors.Is/As).
func Wrap(code Code, err error, format string, args ...any) *Error {
	e := New(code, format, args...)
	e.Err = err
	return e
}

// Entry returns the registry row of e's code; an unregistered code reads as
// Internal, so a programming error still reaches the client as an error.
func (e *Error) Entry() Entry {
	if ent, ok := Lookup(e.Code); ok {
		return ent
	}
	ent, _ := Lookup(Internal)
	return ent
}

// Error formats "[directive N: ]<code>: <message>[: <details>]" (see
// Details): the code and the message once, whatever was wrapped inside.
func (e *Error) Error() string {
	ent := e.Entry()
	s := string(ent.Code) + ": " + ent.Message
	if e.Index >= 0 {
		s = fmt.Sprintf("directive %d: %s", e.Index, s)
	}
	if d := e.Details(); d != "" {
		s += ": " + d
	}
	return s
}

// Details is the detail and the cause ("<detail>: <cause>"), without what
// repeats the registry's own words: a registry error wrapped inside (as a
// cause, or in another error's text) loses its code, and any part that is
// just this error's message is left out. So Wrap(InvalidTTL, err, "ttl")
// of an err that reads "invalid ttl: \"soon\"" says "ttl: \"soon\"", and a
// refusal relayed from another kvpilot keeps one "code: message".
func (e *Error) Details() string {
	text := e.Detail
	if e.Err != nil {
		if text != "" {
			text += ": "
		}
		text += e.Err.Error()
	}
	if text == "" {
		return ""
	}
	msg := e.Entry().Message
	parts := strings.Split(text, ": ")
	kept := parts[:0]
	for i, p := range parts {
		if p == msg || (i+1 < len(parts) && isCodeOf(p, parts[i+1])) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, ": ")
}

// isCodeOf reports whether code is a registry code whose message is msg:
// the "code: message" start of another registry error's text.
func isCodeOf(code, msg string) bool {
	ent, ok := Lookup(Code(code))
	return ok && ent.Message == msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches any *Error with the same code, so registry sentinels work with
// errors.Is regardless of detail.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// At returns a copy of e that names directive i of its turn.
func (e *Error) At(i int) *Error {
	c := *e
	c.Index = i
	return &c
}

// GRPCCode is the value of the gRPC status code e travels under.
func (e *Error) GRPCCode() uint32 { return e.Entry().GRPC }

// As returns the registry error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// From returns err as a registry error: itself when it is one, otherwise an
// Internal error wrapping it. From(nil) is nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := As(err); ok {
		return e
	}
	return Wrap(Internal, err, "")
}

// Lookup returns the registry row for code.
func Lookup(code Code) (Entry, bool) {
	i, ok := byCode[code]
	if !ok {
		return Entry{}, false
	}
	return registry[i], true
}

// LookupNumber returns the registry row for a stable number.
func LookupNumber(n uint16) (Entry, bool) {
	i, ok := byNumber[n]
	if !ok {
		return Entry{}, false
	}
	return registry[i], true
}

// All returns a copy of the registry in number order.
func All() []Entry { return append([]Entry(nil), registry...) }

var (
	byCode   = map[Code]int{}
	byNumber = map[uint16]int{}
)

// init indexes the registry and refuses duplicates: a reused code or number
// would silently change what deployed clients read.
func init() {
	for i, e := range registry {
		if _, dup := byCode[e.Code]; dup {
			panic("errcode: duplicate code " + string(e.Code))
		}
		if _, dup := byNumber[e.Number]; dup {
			panic(fmt.Sprintf("errcode: duplicate number %d", e.Number))
		}
		byCode[e.Code] = i
		byNumber[e.Number] = i
	}
}

// wireError is the JSON form of an Error: everything a client needs without
// the registry at hand.
type wireError struct {
	Code    Code   `json:"code"`
	Number  uint16 `json:"number"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Index   *int   `json:"index,omitempty"`
}

// MarshalJSON writes {"code","number","message","hint","detail","index"}.
func (e *Error) MarshalJSON() ([]byte, error) {
	ent := e.Entry()
	w := wireError{Code: ent.Code, Number: ent.Number, Message: ent.Message, Hint: ent.Hint, Detail: e.Details()}
	if e.Index >= 0 {
		i := e.Index
		w.Index = &i
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the MarshalJSON form back; the cause arrives folded
// into Detail.
func (e *Error) UnmarshalJSON(b []byte) error {
	var w wireError
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Error{Code: w.Code, Detail: w.Detail, Index: -1}
	if w.Index != nil {
		e.Index = *w.Index
	}
	return nil
}
