package directive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The decoders are strict: payloads over Limits.MaxPayload, unknown "type"
// tags, unknown fields, wrong JSON types, missing required fields and
// trailing data are refused with registry errors, before anything is
// applied. They decode only; ValidateTurn and CacheControl.Validate judge
// the values. Note that encoding/json matches field names without regard to
// case; the "type" and "action" tags themselves are matched exactly.

// DecodeCommand decodes one AgenticCommand: {"type":"Cache",...}.
func DecodeCommand(data []byte, l Limits) (Directive, error) {
	if err := checkSize(data, l); err != nil {
		return nil, err
	}
	return decodeCommand(data)
}

// DecodeTurn decodes a turn in any of three forms: one command object, a
// JSON array of commands, or an envelope
// {"id":"...","source":"...","tenant":"...","directives":[...]}. Transports
// should overwrite Source (and Tenant, unless they trust the sender) with
// what they verified, since the audit log records it.
func DecodeTurn(data []byte, l Limits) (Turn, error) {
	if err := checkSize(data, l); err != nil {
		return Turn{}, err
	}
	if t, ok := decodeEnvelope(data, l); ok {
		return t, nil
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := strictDecode(data, &raws); err != nil {
			return Turn{}, err
		}
		ds, err := decodeList(raws, l)
		return Turn{Directives: ds}, err
	}
	var p struct {
		Type       *string         `json:"type"`
		Directives json.RawMessage `json:"directives"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return Turn{}, jsonError(err, "turn")
	}
	switch {
	case p.Type != nil:
		d, err := decodeCommand(data)
		if err != nil {
			return Turn{}, err
		}
		return Turn{Directives: []Directive{d}}, nil
	case p.Directives != nil:
		var env turnEnvelope
		if err := strictDecode(data, &env); err != nil {
			return Turn{}, err
		}
		ds, err := decodeList(env.Directives, l)
		return Turn{ID: env.ID, Source: env.Source, Tenant: env.Tenant, Directives: ds}, err
	}
	return Turn{}, errcode.New(errcode.BadRequest, "want a command with \"type\", a turn with \"directives\", or an array of commands")
}

// turnEnvelope is a turn's wire form with its directives still raw.
type turnEnvelope struct {
	ID         string            `json:"id"`
	Source     string            `json:"source"`
	Tenant     string            `json:"tenant"`
	Directives []json.RawMessage `json:"directives"`
}

// envelopeKeys are turnEnvelope's field names; what nests under
// directives is decoded on its own.
var envelopeKeys = map[string]bool{"id": true, "source": true, "tenant": true, "directives": true}

// decodeEnvelope is DecodeTurn's fast path for what clients send, an
// envelope: one strict decode of it, then one of each directive. It
// reports false for any other form and for any failure, and DecodeTurn then
// goes the general way, which gives the canonical errors.
func decodeEnvelope(data []byte, l Limits) (Turn, bool) {
	var env turnEnvelope
	if decodeKnown(data, &env, envelopeKeys, true) != nil || env.Directives == nil {
		return Turn{}, false
	}
	ds, err := decodeList(env.Directives, l)
	if err != nil {
		return Turn{}, false
	}
	return Turn{ID: env.ID, Source: env.Source, Tenant: env.Tenant, Directives: ds}, true
}

// DecodeCacheControl decodes a router cache_control request.
func DecodeCacheControl(data []byte, l Limits) (CacheControl, error) {
	if err := checkSize(data, l); err != nil {
		return CacheControl{}, err
	}
	var c CacheControl
	if err := strictDecode(data, &c); err != nil {
		return CacheControl{}, err
	}
	return c, nil
}

func decodeList(raws []json.RawMessage, l Limits) ([]Directive, error) {
	if len(raws) > l.maxDirectives() {
		return nil, errcode.New(errcode.TooMany, "%d directives in one turn, limit %d", len(raws), l.maxDirectives())
	}
	ds := make([]Directive, len(raws))
	for i, raw := range raws {
		d, err := decodeCommand(raw)
		if err != nil {
			e, _ := errcode.As(err)
			return nil, e.At(i)
		}
		ds[i] = d
	}
	return ds, nil
}

func checkSize(data []byte, l Limits) error {
	if len(data) > l.maxPayload() {
		return errcode.New(errcode.PayloadTooLarge, "%d bytes, limit %d", len(data), l.maxPayload())
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errcode.New(errcode.BadRequest, "empty payload")
	}
	return nil
}

// decodeCommand reads the tag, then decodes strictly into the verb's type
// (see wireCodec for how required fields are told from zero ones). The
// plain case, a "type" found by a shallow scan, takes one strict decode;
// anything else, and every failure, goes the general way, which gives the
// canonical errors.
func decodeCommand(data []byte) (Directive, error) {
	if v, ok := typeTag(data); ok {
		if d := byVerb[Verb(v)]; d != nil {
			if dir, err := d.decode(data); err == nil {
				return dir, nil
			}
		}
	}
	return decodeCommandSlow(data)
}

func decodeCommandSlow(data []byte) (Directive, error) {
	var t struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, jsonError(err, "command")
	}
	if t.Type == nil {
		return nil, errcode.New(errcode.MissingField, "type")
	}
	d := byVerb[Verb(*t.Type)]
	if d == nil {
		return nil, errcode.New(errcode.UnknownVerb, "type %s: want one of %s", quoteShort(*t.Type), verbList())
	}
	return d.decode(data)
}

// strictDecode decodes exactly one JSON value with no unknown fields.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, "")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errcode.New(errcode.BadRequest, "trailing data after the JSON value at offset %d", dec.InputOffset())
	}
	return nil
}

// jsonError turns an encoding/json failure into a registry error in the
// words of JSON (errcode.FromJSON).
func jsonError(err error, what string) error { return errcode.FromJSON(err, what) }

func missing(field string) error { return errcode.New(errcode.MissingField, "%s", field) }

func verbList() string {
	var b strings.Builder
	for i, v := range Verbs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, v)
	}
	return b.String()
}
