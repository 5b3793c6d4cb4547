package directive

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// TTL is a time-to-live. On the wire it is a JSON number of seconds (the
// AgenticCommand's ttl_seconds) or a string in sdk/ttl syntax ("30s", "5m", "1h",
// "45"). Zero means "the host's default"; the host clamps every TTL to its
// configured range. It is written back as a number of seconds.
type TTL time.Duration

// Duration returns t as a time.Duration.
func (t TTL) Duration() time.Duration { return time.Duration(t) }

// UnmarshalJSON accepts seconds as a number or a TTL string.
func (t *TTL) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errcode.Wrap(errcode.InvalidTTL, err, "%s", quoteShort(string(b)))
		}
		d, err := ttl.Parse(s)
		if err != nil {
			return errcode.Wrap(errcode.InvalidTTL, err, "")
		}
		*t = TTL(d)
		return nil
	}
	secs, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errcode.New(errcode.InvalidTTL, "%s: want seconds or a duration string", quoteShort(string(b)))
	}
	d, err := ttl.FromSeconds(secs)
	if err != nil {
		return errcode.Wrap(errcode.InvalidTTL, err, "")
	}
	*t = TTL(d)
	return nil
}

// MarshalJSON writes whole seconds as an integer, which is what the
// AgenticCommand's u64 fields expect, and anything finer as a duration
// string ("1.5s"), which reads back exactly where a float of seconds would
// not.
func (t TTL) MarshalJSON() ([]byte, error) {
	d := time.Duration(t)
	if d%time.Second == 0 {
		return strconv.AppendInt(nil, int64(d/time.Second), 10), nil
	}
	return json.Marshal(d.String())
}

// String formats like time.Duration.
func (t TTL) String() string { return time.Duration(t).String() }

// TTLOf is a convenience for building optional TTL fields.
func TTLOf(d time.Duration) *TTL { t := TTL(d); return &t }

// WorkerID names a worker. Dynamo sends it as a JSON integer; kvpilot also
// accepts a string (its NATS subject suffix). It is written back in the form
// it reads best in: an integer when it is all digits, else a string.
type WorkerID string

// UnmarshalJSON accepts a non-negative integer or a string.
func (w *WorkerID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" { // Python clients send None for "any worker"
		*w = ""
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return errcode.Wrap(errcode.BadRequest, err, "worker_id")
		}
		if len(s) > 128 || !printable(s) {
			return errcode.New(errcode.BadRequest, "worker_id %s: want at most 128 printable characters", quoteShort(s))
		}
		*w = WorkerID(s)
		return nil
	}
	if !isInteger(string(b)) {
		return errcode.New(errcode.BadRequest, "worker_id %s: want an integer or a string", quoteShort(string(b)))
	}
	*w = WorkerID(b)
	return nil
}

// MarshalJSON writes an integer when the id is one, else a string.
func (w WorkerID) MarshalJSON() ([]byte, error) {
	if w != "" && isInteger(string(w)) {
		return []byte(w), nil
	}
	return json.Marshal(string(w))
}

// isInteger reports whether s is a canonical JSON integer (no sign, no
// leading zeros), so writing it bare stays valid JSON that reads back equal.
func isInteger(s string) bool {
	if s != "" && s[0] == '-' {
		i, err := strconv.ParseInt(s, 10, 64)
		return err == nil && strconv.FormatInt(i, 10) == s
	}
	u, err := strconv.ParseUint(s, 10, 64)
	return err == nil && strconv.FormatUint(u, 10) == s
}
