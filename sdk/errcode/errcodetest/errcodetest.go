// Package errcodetest holds what tests check of the errors users read
// (the CLI's output, the front door's error bodies): each says its
// registry code once, never repeats a registry message, and names no Go
// type. It is for tests; the registry itself is sdk/errcode.
package errcodetest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// goWords are how Go's own packages name types in their errors
// ("json: cannot unmarshal string into Go struct field R.messages of type
// []chat.Message", "'config.Config' has invalid keys"): a qualified
// type name, or the decoders' phrases.
var goWords = regexp.MustCompile(`(\[\]|\*|\b)[a-z][a-z0-9]*\.[A-Z][A-Za-z0-9]*\b|Go struct|Go value|of type |strconv\.|decoding failed|json: cannot`)

// Problems lists what is wrong with msg, one text a user reads; none when
// it is fine.
func Problems(msg string) []string {
	var out []string
	for _, ent := range errcode.All() {
		if n := codeCount(msg, string(ent.Code)); n > 1 {
			out = append(out, fmt.Sprintf("code %s said %d times", ent.Code, n))
		}
		if n := segmentCount(msg, ent.Message); n > 1 {
			out = append(out, fmt.Sprintf("message %q said %d times", ent.Message, n))
		}
	}
	if m := goWords.FindString(msg); m != "" {
		out = append(out, fmt.Sprintf("Go's words %q", m))
	}
	return out
}

// codeCount counts code used as an error's prefix: "code: " at the start
// of msg, of a line, of a quoted string or of a ": "-separated part (not
// inside words: "host unavailable: " is a message, not the code).
func codeCount(msg, code string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(msg[i:], code+": ")
		if j < 0 {
			return n
		}
		at := i + j
		if at == 0 || strings.HasSuffix(msg[:at], ": ") || strings.ContainsRune("\n\"'", rune(msg[at-1])) {
			n++
		}
		i = at + len(code)
	}
}

// segmentCount counts the ": "-separated parts of msg's lines that are
// exactly m.
func segmentCount(msg, m string) int {
	n := 0
	for _, line := range strings.Split(msg, "\n") {
		for _, seg := range strings.Split(strings.TrimSpace(line), ": ") {
			if seg == m {
				n++
			}
		}
	}
	return n
}
