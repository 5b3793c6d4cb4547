package enginewire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
	"github.com/kvpilot/kvpilot/sdk/ttl"
)

// CacheControl is a request's cache_control, {type:"ephemeral", ttl}, as an
// Anthropic Messages request carries it (a "cache_control" object) or as
// Dynamo's nvext extension does ("nvext": {"cache_control": ...}).
type CacheControl struct {
	// Type is "ephemeral", the only kind there is; "" means absent.
	Type string
	// TTL is 0 when the request named none (the host's default applies).
	TTL time.Duration
}

// Present reports whether the request carried a cache_control.
func (c CacheControl) Present() bool { return c.Type != "" }

// Validate accepts an absent cache_control or an ephemeral one.
func (c CacheControl) Validate() error {
	switch c.Type {
	case "", "ephemeral":
		if c.TTL < 0 {
			return errcode.New(errcode.InvalidTTL, "cache_control.ttl %v is negative", c.TTL)
		}
		return nil
	}
	return errcode.New(errcode.BadRequest, "cache_control.type %q: the only type is \"ephemeral\"", c.Type)
}

// ParseTTL reads a cache_control ttl: "5m", "1h", "30s", bare seconds, or
// "" for the host's default.
func ParseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := ttl.Parse(s)
	if err != nil {
		return 0, errcode.Wrap(errcode.InvalidTTL, err, "cache_control.ttl")
	}
	return d, nil
}

type wireCacheControl struct {
	Type string          `json:"type"`
	TTL  json.RawMessage `json:"ttl,omitempty"`
}

type wireEnvelope struct {
	CacheControl *wireCacheControl `json:"cache_control"`
	NVExt        *struct {
		CacheControl *wireCacheControl `json:"cache_control"`
	} `json:"nvext"`
	Type *string `json:"type"`
}

// ParseCacheControlJSON reads any of these (other fields are ignored, so a
// whole request body may be passed):
//
//	{"type": "ephemeral", "ttl": "5m"}
//	{"cache_control": {"type": "ephemeral", "ttl": "1h"}}
//	{"nvext": {"cache_control": {"type": "ephemeral", "ttl": 300}}}
//
// When both the Anthropic and the nvext form are present they must agree.
func ParseCacheControlJSON(b []byte) (CacheControl, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return CacheControl{}, nil
	}
	var env wireEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		return CacheControl{}, errcode.Wrap(errcode.BadRequest, err, "cache_control JSON")
	}
	var forms []*wireCacheControl
	if env.Type != nil {
		var bare wireCacheControl
		if err := json.Unmarshal(b, &bare); err != nil {
			return CacheControl{}, errcode.Wrap(errcode.BadRequest, err, "cache_control JSON")
		}
		forms = append(forms, &bare)
	}
	if env.CacheControl != nil {
		forms = append(forms, env.CacheControl)
	}
	if env.NVExt != nil && env.NVExt.CacheControl != nil {
		forms = append(forms, env.NVExt.CacheControl)
	}
	var out CacheControl
	for i, f := range forms {
		c, err := f.decode()
		if err != nil {
			return CacheControl{}, err
		}
		if i > 0 && c != out {
			return CacheControl{}, errcode.New(errcode.BadRequest, "cache_control given twice with different values (%s %v and %s %v)", out.Type, out.TTL, c.Type, c.TTL)
		}
		out = c
	}
	return out, out.Validate()
}

func (w *wireCacheControl) decode() (CacheControl, error) {
	c := CacheControl{Type: w.Type}
	if c.Type == "" {
		return c, errcode.New(errcode.MissingField, "cache_control.type")
	}
	raw := bytes.TrimSpace(w.TTL)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return c, errcode.Wrap(errcode.InvalidTTL, err, "cache_control.ttl")
		}
		d, err := ParseTTL(s)
		if err != nil {
			return c, err
		}
		c.TTL = d
	default:
		secs, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return c, errcode.New(errcode.InvalidTTL, "cache_control.ttl %.40s: want seconds or a duration string", raw)
		}
		d, err := ttl.FromSeconds(secs)
		if err != nil {
			return c, errcode.Wrap(errcode.InvalidTTL, err, "cache_control.ttl")
		}
		c.TTL = d
	}
	return c, c.Validate()
}
