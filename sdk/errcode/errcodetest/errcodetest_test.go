package errcodetest

import "testing"

func TestProblems(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want int
	}{
		{`invalid_ttl: invalid ttl: ttl_seconds: "soon": want seconds`, 0},
		{"refused: directive 0: unknown_block: unknown block: Cache: none cached\n  hint: re-send", 0},
		{`invalid_ttl: invalid ttl: invalid ttl: "soon"`, 1},
		{"capacity_exhausted: tier capacity exhausted: pause: tier capacity exhausted", 1},
		{"bad_request: malformed request: upstream: bad_request: malformed request: x", 2},
		{"bad_request: malformed request: field R.messages of type []chat.Message", 1},
		{"got JSON string, want []directive.Hash", 1},
		{"'config.Config' has invalid keys: foo", 1},
		{`kvpilot ctl: pin-prefix: invalid ttl: "5m": want seconds ("300") or a duration ("30s", "5m", "1h")`, 0},
	} {
		if got := Problems(c.msg); len(got) != c.want {
			t.Errorf("%q: %v, want %d problems", c.msg, got, c.want)
		}
	}
}
