package directive

import (
	"bytes"
	"encoding/json"
)

// typeTag finds the "type" member of a JSON object by a shallow scan of its
// top-level members, so a command's verb is known before its one strict
// decode instead of after a full decode of its own. It only recognises the
// plain case (the key spelled exactly, a string value without escapes) and
// otherwise reports false; it never judges validity, which the strict
// decoder that follows does.
func typeTag(data []byte) (string, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", false
	}
	i++
	for {
		i = skipSpace(data, i)
		key, next, ok := plainString(data, i)
		if !ok {
			return "", false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return "", false
		}
		i = skipSpace(data, i+1)
		if key == "type" {
			v, _, ok := plainString(data, i)
			return v, ok
		}
		if i, ok = skipValue(data, i); !ok {
			return "", false
		}
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ',' {
			return "", false
		}
		i++
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at data[i] that has no escapes.
func plainString(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '"':
			return string(data[i+1 : j]), j + 1, true
		case '\\':
			return "", i, false
		}
	}
	return "", i, false
}

// skipValue steps over one JSON value at data[i]: a string, a nested
// object or array, or a scalar up to the next delimiter.
func skipValue(data []byte, i int) (int, bool) {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			j := i + 1
			for ; j < len(data) && data[j] != '"'; j++ {
				if data[j] == '\\' {
					j++
				}
			}
			if j >= len(data) {
				return i, false
			}
			i = j + 1
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i, true
			}
			i++
		default:
			i++
		}
		if depth == 0 && i < len(data) && (data[i] == ',' || data[i] == '}' || data[i] == ']') {
			return i, true
		}
	}
	return i, depth == 0
}

// plainObject reports whether data is a JSON object whose top-level keys
// are all plain strings found in known, and, unless nested, that holds no
// '{' after its opening one (so no nested object whose keys would need
// checking too). It does not judge validity. For such an object
// json.Unmarshal accepts and decodes exactly what the strict decoder does
// (strictDecode: a Decoder that refuses unknown fields): the only field
// names it can meet are known ones, spelled exactly.
func plainObject(data []byte, known map[string]bool, nested bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	if !nested && bytes.IndexByte(data[i+1:], '{') >= 0 {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for {
		i = skipSpace(data, i)
		key, next, ok := plainString(data, i)
		if !ok || !known[key] {
			return false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		if i, ok = skipValue(data, skipSpace(data, i+1)); !ok {
			return false
		}
		i = skipSpace(data, i)
		if i < len(data) && data[i] == '}' {
			return true
		}
		if i >= len(data) || data[i] != ',' {
			return false
		}
		i++
	}
}

// plainShortcut turns plainObject's shortcut on; tests turn it off to
// hold it to the strict decoder.
var plainShortcut = true

// decodeKnown decodes data strictly into v, whose JSON fields are known:
// by json.Unmarshal when plainObject vouches for it (one scan less and no
// Decoder), else by strictDecode.
func decodeKnown(data []byte, v any, known map[string]bool, nested bool) error {
	if plainShortcut && plainObject(data, known, nested) {
		if err := json.Unmarshal(data, v); err != nil {
			return jsonError(err, "")
		}
		return nil
	}
	return strictDecode(data, v)
}
