// Package ttl parses the time-to-live strings every kvpilot front end accepts
// ("30s", "5m", "1h", "1h30m", or bare seconds such as "45") and applies the
// host's default and clamps to them.
//
// It sits in sdk/ so that policies, clients and the host agree on one syntax.
package ttl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every parse failure.
var ErrInvalid = errors.New("invalid ttl")

// Max is the longest TTL anything in kvpilot accepts: 10 years. Longer
// values are almost certainly unit mistakes (milliseconds sent as seconds).
const Max = 10 * 365 * 24 * time.Hour

// Parse reads a TTL. A bare number is seconds (fractions allowed); anything
// else must be a Go duration with a unit ("30s", "5m", "1h", "1h30m"). Zero
// means "use the default" and is returned as 0. Negative, overlong and
// non-finite values fail with an error wrapping ErrInvalid.
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: empty string; write seconds (\"300\") or a duration (\"30s\", \"5m\", \"1h\")", ErrInvalid)
	}
	if isNumber(s) {
		secs, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q is not a number of seconds", ErrInvalid, s)
		}
		return FromSeconds(secs)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: want seconds (\"300\") or a duration (\"30s\", \"5m\", \"1h\")", ErrInvalid, s)
	}
	return check(d, s)
}

// FromSeconds converts a JSON-style number of seconds, with the same rules as
// Parse.
func FromSeconds(secs float64) (time.Duration, error) {
	if secs != secs || secs < 0 || secs > Max.Seconds() {
		return 0, fmt.Errorf("%w: %v seconds: want 0 (default) up to %v", ErrInvalid, secs, Max)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func check(d time.Duration, s string) (time.Duration, error) {
	if d < 0 || d > Max {
		return 0, fmt.Errorf("%w: %q: want 0 (default) up to %v", ErrInvalid, s, Max)
	}
	return d, nil
}

func isNumber(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' && r != '-' && r != '+' {
			return false
		}
	}
	return true
}

// Policy holds the host's default TTL and the clamps every requested TTL is
// forced into. Its zero value is not useful; see DefaultPolicy.
type Policy struct {
	Default time.Duration
	Min     time.Duration
	Max     time.Duration
}

// DefaultPolicy is the built-in policy: 300 s by default,
// clamped to [1 s, 24 h].
var DefaultPolicy = Policy{Default: 300 * time.Second, Min: time.Second, Max: 24 * time.Hour}

// Validate reports a policy whose default lies outside its own clamps.
func (p Policy) Validate() error {
	switch {
	case p.Min <= 0:
		return fmt.Errorf("min must be positive, got %v", p.Min)
	case p.Max < p.Min:
		return fmt.Errorf("max %v is below min %v", p.Max, p.Min)
	case p.Default < p.Min || p.Default > p.Max:
		return fmt.Errorf("default %v is outside [%v, %v]", p.Default, p.Min, p.Max)
	}
	return nil
}

// Resolve returns the TTL to apply for a request of d: the default for 0,
// otherwise d clamped into [Min, Max].
func (p Policy) Resolve(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return p.Default
	case d < p.Min:
		return p.Min
	case d > p.Max:
		return p.Max
	}
	return d
}
