package errcode

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// FromJSON turns an encoding/json decoding failure into a BadRequest that
// speaks JSON, not Go: the field's path, what was sent and what is wanted
// (`field "block_hashes": got a string, want a list`), never a Go type
// name. A registry error (from an UnmarshalJSON method) passes through
// unchanged; what names the value when the failure names no field (the
// whole body, "turn").
func FromJSON(err error, what string) *Error {
	if e, ok := As(err); ok {
		return e
	}
	if what == "" {
		what = "value"
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return New(BadRequest, "invalid JSON at offset %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return New(BadRequest, "%s: got %s, want %s", what, jsonValue(typ.Value), jsonKind(typ.Type))
		}
		return New(BadRequest, "field %s: got %s, want %s", strconv.Quote(typ.Field), jsonValue(typ.Value), jsonKind(typ.Type))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return New(BadRequest, "truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return New(BadRequest, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return New(BadRequest, "%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonValue names what encoding/json found ("string", "number 1.5").
func jsonValue(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	}
	return "a " + v
}

// jsonKind names the JSON a Go type reads.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another value"
}
