package enginewire

import (
	"errors"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

func TestParseCacheControlJSON(t *testing.T) {
	eph := func(d time.Duration) CacheControl { return CacheControl{Type: "ephemeral", TTL: d} }
	cases := []struct {
		in   string
		want CacheControl
		code errcode.Code
	}{
		{``, CacheControl{}, ""},
		{`{}`, CacheControl{}, ""},
		{`{"model":"x","messages":[]}`, CacheControl{}, ""},
		{`{"type":"ephemeral"}`, eph(0), ""},
		{`{"type":"ephemeral","ttl":"5m"}`, eph(5 * time.Minute), ""},
		{`{"cache_control":{"type":"ephemeral","ttl":"1h"}}`, eph(time.Hour), ""},
		{`{"nvext":{"cache_control":{"type":"ephemeral","ttl":300}}}`, eph(300 * time.Second), ""},
		{`{"nvext":{"cache_control":{"type":"ephemeral","ttl":"45"}}}`, eph(45 * time.Second), ""},
		{`{"cache_control":{"type":"ephemeral","ttl":"5m"},"nvext":{"cache_control":{"type":"ephemeral","ttl":300}}}`, eph(5 * time.Minute), ""},
		{`{"cache_control":{"type":"ephemeral","ttl":"5m"},"nvext":{"cache_control":{"type":"ephemeral","ttl":"1h"}}}`, CacheControl{}, errcode.BadRequest},
		{`{"cache_control":{"type":"persistent"}}`, CacheControl{}, errcode.BadRequest},
		{`{"cache_control":{"ttl":"5m"}}`, CacheControl{}, errcode.MissingField},
		{`{"cache_control":{"type":"ephemeral","ttl":"soon"}}`, CacheControl{}, errcode.InvalidTTL},
		{`{"cache_control":{"type":"ephemeral","ttl":-3}}`, CacheControl{}, errcode.InvalidTTL},
		{`{"cache_control":{"type":"ephemeral","ttl":true}}`, CacheControl{}, errcode.InvalidTTL},
		{`[1,2]`, CacheControl{}, errcode.BadRequest},
		{`{"cache_control":`, CacheControl{}, errcode.BadRequest},
	}
	for _, c := range cases {
		got, err := ParseCacheControlJSON([]byte(c.in))
		if c.code != "" {
			e, ok := errcode.As(err)
			if !ok || e.Code != c.code {
				t.Errorf("%s: error %v, want code %s", c.in, err, c.code)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
}

func FuzzParseCacheControlJSON(f *testing.F) {
	for _, s := range []string{`{"type":"ephemeral","ttl":"5m"}`, `{"nvext":{"cache_control":{"type":"ephemeral","ttl":300}}}`, `{"cache_control":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCacheControlJSON(b)
		if err != nil {
			if _, ok := errcode.As(err); !ok {
				t.Fatalf("%q: unstructured error %v", b, err)
			}
			return
		}
		if c.Validate() != nil || c.TTL < 0 {
			t.Fatalf("%q: accepted invalid %+v", b, c)
		}
	})
}

func TestFDMessages(t *testing.T) {
	tok := []byte("0123456789abcdef")
	got, err := DecodeFDRequest(EncodeFDRequest(tok))
	if err != nil || string(got) != string(tok) {
		t.Fatalf("request round trip: %q %v", got, err)
	}
	if _, err := DecodeFDRequest([]byte("KVPFD001short")); !errors.Is(err, ErrFDProtocol) {
		t.Fatalf("short claim: %v", err)
	}
	n, reason, err := DecodeFDReply(EncodeFDReply(0, "token expired"))
	if err != nil || n != 0 || reason != "token expired" {
		t.Fatalf("reply: %d %q %v", n, reason, err)
	}
	if _, _, err := DecodeFDReply([]byte("nope")); !errors.Is(err, ErrFDProtocol) {
		t.Fatalf("bad reply: %v", err)
	}
}

func TestLayoutValidate(t *testing.T) {
	ok := Layout{PageSize: 16, DType: "bf16", Layers: 1, Buffers: []Buffer{{"k", 1, 8}}, Rope: &RopeSlice{0, 0, 8, "half_split"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Layout){
		func(l *Layout) { l.PageSize = 0 },
		func(l *Layout) { l.DType = "int4" },
		func(l *Layout) { l.Buffers = nil },
		func(l *Layout) { l.Rope = &RopeSlice{1, 0, 8, "half_split"} },
		func(l *Layout) { l.Rope = &RopeSlice{0, 2, 8, "half_split"} },
		func(l *Layout) { l.Rope = &RopeSlice{0, 0, 7, "half_split"} },
		func(l *Layout) { l.Rope = &RopeSlice{0, 0, 8, "neox"} },
	} {
		l := ok
		l.Buffers = append([]Buffer(nil), ok.Buffers...)
		mut(&l)
		if err := l.Validate(); !errors.Is(err, ErrLayout) {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
