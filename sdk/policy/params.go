package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// DecodeParams decodes a policy's params strictly: an unknown key is an
// error naming it, so a typo in the host config fails at load instead of
// silently running with a default.
func DecodeParams(raw json.RawMessage, into any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("params: %w", err)
	}
	return nil
}

// Duration is a params duration: a string in sdk/ttl syntax ("30s", "5m",
// "1h", "45") or a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalJSON accepts "5m" or 300.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v time.Duration
	var err error
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err = json.Unmarshal(b, &s); err == nil {
			v, err = ttl.Parse(s)
		}
	} else {
		var f float64
		if f, err = strconv.ParseFloat(string(b), 64); err == nil {
			v, err = ttl.FromSeconds(f)
		}
	}
	if err != nil {
		return fmt.Errorf("duration %s: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
