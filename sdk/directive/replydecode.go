package directive

import (
	"encoding/json"
	"strconv"
)

// DecodeTurnReply decodes a turn's JSON answer into what json.Unmarshal
// would make of it. The answers a host writes (TurnReply.AppendJSON: keys
// in order, plain strings, no error) are read by a small scanner instead
// of by reflection, which was the larger part of a NATS client's CPU per
// round trip; anything else, errors included, goes to json.Unmarshal.
// FuzzReplyDecodeAgrees holds the two together.
func DecodeTurnReply(data []byte) (TurnReply, error) {
	if r, ok := scanTurnReply(data); ok {
		return r, nil
	}
	var r TurnReply
	err := json.Unmarshal(data, &r)
	return r, err
}

// replyScanner reads the exact shape AppendJSON writes. Every method
// reports false on anything else, and the caller then falls back.
type replyScanner struct {
	b  []byte
	ok bool
}

func scanTurnReply(data []byte) (TurnReply, bool) {
	s := replyScanner{b: data, ok: true}
	var r TurnReply
	s.lit(`{"status":`)
	r.Status = s.str()
	if s.opt(`,"turn_id":`) {
		r.TurnID = s.nonEmpty()
	}
	s.lit(`,"results":`)
	if !s.opt("null") {
		r.Results = []Result{}
		s.lit("[")
		for s.ok && !s.opt("]") {
			if len(r.Results) > 0 {
				s.lit(",")
			}
			r.Results = append(r.Results, s.result())
		}
	}
	if s.opt(`,"worker_id":`) {
		s.unmarshaler(&r.WorkerID)
		s.ok = s.ok && r.WorkerID != ""
	}
	if s.opt(`,"warning":`) {
		r.Warning = s.nonEmpty()
	}
	s.lit("}")
	return r, s.ok && len(s.b) == 0
}

func (s *replyScanner) result() Result {
	var r Result
	s.lit(`{"index":`)
	r.Index = int(s.int())
	s.lit(`,"verb":`)
	r.Verb = Verb(s.str())
	s.lit(`,"status":`)
	r.Status = s.str()
	s.lit(`,"effect":{"blocks":`)
	e := &r.Effect
	e.Blocks = int(s.int())
	if s.opt(`,"skipped":`) {
		e.Skipped = int(s.nonZero())
	}
	if s.opt(`,"skips":[`) {
		for s.ok && (len(e.Skips) == 0 || s.opt(",")) {
			s.lit(`{"reason":`)
			reason := SkipReason(s.str())
			s.lit(`,"blocks":`)
			e.Skips = append(e.Skips, Skip{Reason: reason, Blocks: int(s.int())})
			s.lit("}")
		}
		s.lit("]")
	}
	if s.opt(`,"missing":`) {
		e.Missing = int(s.nonZero())
	}
	if s.opt(`,"tokens":`) {
		e.Tokens = s.nonZero()
	}
	if s.opt(`,"lease_id":`) {
		e.LeaseID = s.nonEmpty()
	}
	if s.opt(`,"ttl_seconds":`) {
		s.unmarshaler(&e.TTL)
		s.ok = s.ok && e.TTL != 0
	}
	if s.opt(`,"recomputed_tokens":`) {
		e.RecomputedTokens = s.nonZero()
	}
	if s.opt(`,"recompute_region":`) {
		e.RecomputeRegion = s.nonZero()
	}
	s.lit("}}")
	return r
}

// lit consumes exactly t.
func (s *replyScanner) lit(t string) {
	if !s.opt(t) {
		s.ok = false
	}
}

// opt consumes t when the input starts with it.
func (s *replyScanner) opt(t string) bool {
	if !s.ok || len(s.b) < len(t) || string(s.b[:len(t)]) != t {
		return false
	}
	s.b = s.b[len(t):]
	return true
}

// str reads a string of printable ASCII without escapes, which JSON
// decodes to itself.
func (s *replyScanner) str() string {
	if !s.ok || len(s.b) == 0 || s.b[0] != '"' {
		s.ok = false
		return ""
	}
	for i := 1; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			v := string(s.b[1:i])
			s.b = s.b[i+1:]
			return v
		case c < 0x20 || c > 0x7e || c == '\\':
			s.ok = false
			return ""
		}
	}
	s.ok = false
	return ""
}

// nonEmpty reads an omitempty string, which AppendJSON never writes empty.
func (s *replyScanner) nonEmpty() string {
	v := s.str()
	s.ok = s.ok && v != ""
	return v
}

// int reads a JSON integer in canonical form that fits in an int.
func (s *replyScanner) int() int64 {
	n := 0
	for n < len(s.b) && (s.b[n] == '-' && n == 0 || s.b[n] >= '0' && s.b[n] <= '9') {
		n++
	}
	num := string(s.b[:n])
	v, err := strconv.ParseInt(num, 10, strconv.IntSize)
	if !s.ok || err != nil || strconv.FormatInt(v, 10) != num || num == "-0" {
		s.ok = false
		return 0
	}
	s.b = s.b[n:]
	return v
}

// nonZero reads an omitempty integer, which AppendJSON never writes as 0.
func (s *replyScanner) nonZero() int64 {
	v := s.int()
	s.ok = s.ok && v != 0
	return v
}

// unmarshaler hands a plain integer or string value to v's own
// UnmarshalJSON, as json.Unmarshal would.
func (s *replyScanner) unmarshaler(v json.Unmarshaler) {
	if !s.ok || len(s.b) == 0 {
		s.ok = false
		return
	}
	rest := *s
	if s.b[0] == '"' {
		rest.str()
	} else {
		rest.int()
	}
	if !rest.ok {
		s.ok = false
		return
	}
	raw := s.b[:len(s.b)-len(rest.b)]
	if v.UnmarshalJSON(raw) != nil {
		s.ok = false
		return
	}
	s.b = rest.b
}
