package directive

import (
	"encoding/json"
	"strconv"
)

// AppendJSON appends r encoded exactly as json.Marshal encodes it, without
// reflection: every NATS turn is answered with it, and json.Marshal's walk
// of the reply was about a tenth of a round trip's CPU. A field whose
// encoding is not plain (an error, a string needing escapes) goes through
// json.Marshal, so the bytes stay json.Marshal's; FuzzReplyJSONAgrees
// holds the two together.
func (r TurnReply) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"status":`...)
	b = appendString(b, r.Status)
	if r.TurnID != "" {
		b = append(b, `,"turn_id":`...)
		b = appendString(b, r.TurnID)
	}
	b = append(b, `,"results":`...)
	if r.Results == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, res := range r.Results {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = res.appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	var err error
	if r.Error != nil {
		b = append(b, `,"error":`...)
		if b, err = appendMarshaled(b, r.Error); err != nil {
			return nil, err
		}
	}
	if r.WorkerID != "" {
		b = append(b, `,"worker_id":`...)
		if isInteger(string(r.WorkerID)) {
			b = append(b, r.WorkerID...)
		} else {
			b = appendString(b, string(r.WorkerID))
		}
	}
	if r.Warning != "" {
		b = append(b, `,"warning":`...)
		b = appendString(b, r.Warning)
	}
	return append(b, '}'), nil
}

func (r Result) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	b = append(b, `,"verb":`...)
	b = appendString(b, string(r.Verb))
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	b = append(b, `,"effect":`...)
	b = r.Effect.appendJSON(b)
	if r.Error != nil {
		var err error
		b = append(b, `,"error":`...)
		if b, err = appendMarshaled(b, r.Error); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func (e Effect) appendJSON(b []byte) []byte {
	b = append(b, `{"blocks":`...)
	b = strconv.AppendInt(b, int64(e.Blocks), 10)
	if e.Skipped != 0 {
		b = append(b, `,"skipped":`...)
		b = strconv.AppendInt(b, int64(e.Skipped), 10)
	}
	if len(e.Skips) > 0 {
		b = append(b, `,"skips":[`...)
		for i, s := range e.Skips {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"reason":`...)
			b = appendString(b, string(s.Reason))
			b = append(b, `,"blocks":`...)
			b = strconv.AppendInt(b, int64(s.Blocks), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if e.Missing != 0 {
		b = append(b, `,"missing":`...)
		b = strconv.AppendInt(b, int64(e.Missing), 10)
	}
	if e.Tokens != 0 {
		b = append(b, `,"tokens":`...)
		b = strconv.AppendInt(b, e.Tokens, 10)
	}
	if e.LeaseID != "" {
		b = append(b, `,"lease_id":`...)
		b = appendString(b, e.LeaseID)
	}
	if e.TTL != 0 {
		b = append(b, `,"ttl_seconds":`...)
		if ttl, err := e.TTL.MarshalJSON(); err == nil && plainJSON(ttl) {
			b = append(b, ttl...)
		} else {
			b, _ = appendMarshaled(b, e.TTL) // a Duration's string never fails to encode
		}
	}
	if e.RecomputedTokens != 0 {
		b = append(b, `,"recomputed_tokens":`...)
		b = strconv.AppendInt(b, e.RecomputedTokens, 10)
	}
	if e.RecomputeRegion != 0 {
		b = append(b, `,"recompute_region":`...)
		b = strconv.AppendInt(b, e.RecomputeRegion, 10)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string: as it is when every byte is
// printable ASCII that encoding/json writes unescaped, else json.Marshal's
// encoding (its escapes for HTML characters, control bytes and invalid
// UTF-8).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON reports whether a Marshaler's output is already what
// json.Marshal would write for it: no spaces to compact, nothing to escape.
func plainJSON(v []byte) bool {
	for _, c := range v {
		if c <= ' ' || c > 0x7e || c == '<' || c == '>' || c == '&' || c == '\\' {
			return false
		}
	}
	return len(v) > 0
}

func appendMarshaled(b []byte, v any) ([]byte, error) {
	m, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, m...), nil
}
