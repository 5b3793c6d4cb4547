package directive

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Hash is a block hash: a sequence hash, or a local hash when
// a list is resolved as a path. On the wire it is a JSON integer, either
// unsigned (Dynamo events, cache_control) or signed int64 (the AgenticCommand's
// i64 fields, bit-cast), or a string holding either of those or 0x-hex. It is
// always written back as an unsigned integer.
type Hash uint64

// ParseHash reads the string forms of a hash: unsigned decimal, signed
// decimal (bit-cast from int64), or 0x-prefixed hex of up to 16 digits.
func ParseHash(s string) (Hash, error) {
	if h, ok := parseHash(s); ok {
		return h, nil
	}
	return 0, errcode.New(errcode.InvalidHash, "%s", quoteShort(s))
}

func parseHash(s string) (Hash, bool) {
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") {
		u, err := strconv.ParseUint(s[2:], 16, 64)
		return Hash(u), err == nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return Hash(u), true
	}
	if strings.HasPrefix(s, "-") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Hash(uint64(i)), true
		}
	}
	return 0, false
}

// UnmarshalJSON accepts a JSON integer or a string in a ParseHash form.
// null, fractions and exponents are refused: a hash that went through a
// float has lost bits.
func (h *Hash) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		u, err := strconv.Unquote(s)
		if err != nil {
			return errcode.New(errcode.InvalidHash, "%s", quoteShort(s))
		}
		s = u
	}
	v, ok := parseHash(s)
	if !ok {
		return errcode.New(errcode.InvalidHash, "%s: want an unsigned or signed 64-bit integer", quoteShort(string(b)))
	}
	*h = v
	return nil
}

// MarshalJSON writes the unsigned decimal integer.
func (h Hash) MarshalJSON() ([]byte, error) {
	return strconv.AppendUint(nil, uint64(h), 10), nil
}

// String is the unsigned decimal form.
func (h Hash) String() string { return strconv.FormatUint(uint64(h), 10) }

// Int64 is the AgenticCommand's signed view of the same bits.
func (h Hash) Int64() int64 { return int64(h) }

// BlockKey is one entry of Warm.block_keys. The AgenticCommand calls these
// storage keys ("abc123..."); in kvpilot the shared tier is keyed by sequence hash,
// so a key that reads as a hash (ParseHash forms) names that block and any
// other key is an opaque name that matches no block: Warm counts it as
// missing rather than refusing the command, as the format's partial warm does.
type BlockKey string

// MaxBlockKeyLen bounds one key; a SHA-256 hex digest is 64 characters.
const MaxBlockKeyLen = 128

// Hash returns the block hash the key names, if it reads as one.
func (k BlockKey) Hash() (Hash, bool) { return parseHash(string(k)) }

func (k BlockKey) validate() error {
	if k == "" {
		return errcode.New(errcode.InvalidHash, "empty block key")
	}
	if len(k) > MaxBlockKeyLen {
		return errcode.New(errcode.InvalidHash, "block key of %d bytes exceeds %d", len(k), MaxBlockKeyLen)
	}
	if !printable(string(k)) {
		return errcode.New(errcode.InvalidHash, "block key %s has control characters or invalid UTF-8", quoteShort(string(k)))
	}
	return nil
}

// printable reports valid UTF-8 without control characters: ids and keys
// end up in logs and NATS subjects, where those do harm.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// quoteShort quotes s for an error detail, cut to a readable length so a
// hostile payload cannot blow up the reply.
func quoteShort(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}
