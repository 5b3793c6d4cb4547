package directive

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The fuzz targets hold three properties for any input a peer can send:
// no panic; every rejection is a registered error; and what is accepted
// re-encodes to a canonical form that decodes to the same canonical form.
// Seed corpora live in testdata/fuzz/<Target>; f.Add adds the seed examples.

func fuzzSeeds(f *testing.F) {
	for _, c := range seedCommands {
		f.Add([]byte(c.json))
	}
	f.Add([]byte(seedCacheControl))
}

func requireRegistered(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	e, ok := errcode.As(err)
	if !ok {
		t.Fatalf("%s: %v (%T) is not a registry error", what, err, err)
	}
	if _, ok := errcode.Lookup(e.Code); !ok {
		t.Fatalf("%s: code %q is not registered", what, e.Code)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := DecodeCommand(data, Limits{})
		requireRegistered(t, "decode", err)
		if err != nil {
			return
		}
		requireRegistered(t, "validate", d.Validate(Limits{}))
		requireStable(t, d)
	})
}

// The shallow "type" scan is only a shortcut: whatever it finds, a command
// decodes exactly as the general path decodes it, and fails where it fails.
func FuzzTypeTagShortcutAgrees(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"type":"Cache","TYPE":"Pin","block_hashes":[1],"pin":true}`))
	f.Add([]byte(`{"pin":true,"block_hashes":[1,{"type":"x"}],"type":"Cache"}`))
	f.Add([]byte(`{"session":"s\"}","type":"Pin","end":64}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ferr := decodeCommand(data)
		slow, serr := decodeCommandSlow(data)
		if (ferr == nil) != (serr == nil) || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: shortcut %#v, %v; general %#v, %v", data, fast, ferr, slow, serr)
		}
		if ferr != nil && ferr.Error() != serr.Error() {
			t.Fatalf("%q: shortcut error %v, general %v", data, ferr, serr)
		}
	})
}

// The plain-object shortcut (json.Unmarshal where only known keys can
// meet the decoder) is only a shortcut too: turns and commands decode
// exactly as the strict decoder alone decodes them, and fail alike.
func FuzzPlainShortcutAgrees(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"directives":[{"type":"Cache","block_hashes":[1],"pin":true}]}`))
	f.Add([]byte(`{"directives":[{"type":"Cache","block_hashes":[1],"pin":true,"Pin":false}]}`))
	f.Add([]byte(`{"ID":"x","directives":[{"type":"Cache","block_hashes":[1],"pin":true}]}`))
	f.Add([]byte(`{"id":"x","directives":[],"extra":{"a":1}}`))
	f.Add([]byte(`{"type":"Splice","session":"s","start":4,"end":9,"replacement":{"text":"x","more":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		decode := func(shortcut bool) (Turn, error) {
			defer func(was bool) { plainShortcut = was }(plainShortcut)
			plainShortcut = shortcut
			return DecodeTurn(data, Limits{MaxDirectives: 64})
		}
		fast, ferr := decode(true)
		slow, serr := decode(false)
		if (ferr == nil) != (serr == nil) || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: shortcut %#v, %v; strict %#v, %v", data, fast, ferr, slow, serr)
		}
		if ferr != nil && ferr.Error() != serr.Error() {
			t.Fatalf("%q: shortcut error %v, strict %v", data, ferr, serr)
		}
	})
}

func FuzzDecodeTurn(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"id":"t","tenant":"a","directives":[{"type":"Splice","session":"s","start":4,"end":9,"replacement":"x"},{"type":"Evict","session":"s","start":8,"end":12}]}`))
	f.Add([]byte(`[{"type":"Pin","session":"s","end":64,"ttl":"5m"},{"type":"Splice","session":"s","start":3,"end":3,"replacement":[1,2]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		turn, err := DecodeTurn(data, Limits{MaxDirectives: 64})
		requireRegistered(t, "decode", err)
		if err != nil {
			return
		}
		verr := ValidateTurn(turn, Limits{SinkTokens: 4, MaxDirectives: 64})
		if verr != nil {
			te, ok := verr.(*TurnError)
			if !ok {
				t.Fatalf("ValidateTurn returned %T", verr)
			}
			requireRegistered(t, "validate", te.Err)
			for _, e := range te.Each {
				if e != nil {
					requireRegistered(t, "validate each", e)
				}
			}
		}
		out, err := json.Marshal(turn)
		if err != nil {
			t.Fatalf("marshal %v: %v", turn, err)
		}
		back, err := DecodeTurn(out, Limits{MaxPayload: 8 << 20, MaxDirectives: 64})
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, out) {
			t.Fatalf("unstable turn encoding:\n%s\n%s", out, again)
		}
	})
}

func FuzzDecodeCacheControl(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"action":"pin_prefix","token_ids":[1,2,3],"ttl_seconds":"5m"}`))
	f.Add([]byte(`{"action":"evict_descendants","block_hashes":["0xff",-1],"worker_id":"w1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCacheControl(data, Limits{})
		requireRegistered(t, "decode", err)
		if err != nil {
			return
		}
		requireRegistered(t, "validate", c.Validate(Limits{}))
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeCacheControl(out, Limits{MaxPayload: 8 << 20})
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, out) {
			t.Fatalf("unstable encoding:\n%s\n%s", out, again)
		}
	})
}

func requireStable(t *testing.T, d Directive) {
	t.Helper()
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatalf("marshal %#v: %v", d, err)
	}
	back, err := DecodeCommand(out, Limits{MaxPayload: 8 << 20})
	if err != nil {
		t.Fatalf("re-decode %s: %v", out, err)
	}
	if again, _ := json.Marshal(back); !bytes.Equal(again, out) {
		t.Fatalf("unstable encoding:\n%s\n%s", out, again)
	}
}
