package directive

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// The formats' published examples, verbatim (the AgenticCommand JSON wire
// format; a cache_control request).
var seedCommands = []struct {
	json string
	want Directive
}{
	{`{"type": "Warm", "block_keys": ["abc123...", "def456..."], "target_tier": "CPU_TIER1"}`,
		Warm{BlockKeys: []BlockKey{"abc123...", "def456..."}, TargetTier: "CPU_TIER1"}},
	{`{"type": "Prune", "after_block_hash": 1234567890}`,
		Prune{AfterBlockHash: 1234567890}},
	{`{"type": "Cache", "block_hashes": [111, 222, 333], "pin": true}`,
		Cache{BlockHashes: []Hash{111, 222, 333}, Pin: true}},
	{`{"type": "Think", "block_hashes": [444, 555], "transient": true}`,
		Think{BlockHashes: []Hash{444, 555}, Transient: true}},
	{`{"type": "Pause", "block_hashes": [666, 777], "ttl_seconds": 3600, "lease_id": "session-abc"}`,
		Pause{BlockHashes: []Hash{666, 777}, TTL: TTLOf(time.Hour), LeaseID: "session-abc"}},
}

const seedCacheControl = `{
    "action": "pin_blocks",
    "block_hashes": [15310707395893867146, 15292316782987903195],
    "worker_id": 42
}`

func TestSeedCommandsVerbatim(t *testing.T) {
	for _, tc := range seedCommands {
		d, err := DecodeCommand([]byte(tc.json), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if !reflect.DeepEqual(d, tc.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", tc.json, d, tc.want)
		}
		if err := ValidateTurn(Turn{Directives: []Directive{d}}, Limits{}); err != nil {
			t.Errorf("%s: validate: %v", tc.json, err)
		}
		// Round trip: what we write reads back equal.
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeCommand(out, Limits{})
		if err != nil || !reflect.DeepEqual(back, d) {
			t.Errorf("round trip %s -> %s -> %#v, %v", tc.json, out, back, err)
		}
	}
}

func TestSeedCacheControlVerbatim(t *testing.T) {
	c, err := DecodeCacheControl([]byte(seedCacheControl), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := CacheControl{Action: ActionPinBlocks, BlockHashes: []Hash{15310707395893867146, 15292316782987903195}, WorkerID: "42"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %#v want %#v", c, want)
	}
	if err := c.Validate(Limits{}); err != nil {
		t.Fatal(err)
	}
	// The seed's reply shape.
	r := OKReply(c.Action, 2, "Pinned 2/2 blocks", c.WorkerID)
	out, _ := json.Marshal(r)
	if got, want := string(out), `{"status":"ok","pinned_count":2,"message":"Pinned 2/2 blocks","worker_id":42}`; got != want {
		t.Fatalf("reply %s, want %s", got, want)
	}
}

func TestHashForms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Hash
	}{
		{`18446744073709551615`, Hash(^uint64(0))},
		{`-1`, Hash(^uint64(0))},
		{`-9223372036854775808`, Hash(1 << 63)},
		{`"15310707395893867146"`, 15310707395893867146},
		{`"-2"`, Hash(^uint64(1))},
		{`"0xff"`, 255},
		{`"0XFFFFFFFFFFFFFFFF"`, Hash(^uint64(0))},
		{`0`, 0},
	} {
		var h Hash
		if err := json.Unmarshal([]byte(tc.in), &h); err != nil || h != tc.want {
			t.Errorf("%s: got %d, %v; want %d", tc.in, h, err, tc.want)
		}
	}
	for _, bad := range []string{`1.5`, `1e3`, `18446744073709551616`, `-9223372036854775809`, `"0x"`, `"0x1ffffffffffffffff"`, `"abc"`, `null`, `true`, `""`, `"+5"`} {
		var h Hash
		err := json.Unmarshal([]byte(bad), &h)
		if !errors.Is(err, errcode.ErrInvalidHash) {
			t.Errorf("%s: got %v, want invalid_hash", bad, err)
		}
	}
}

func TestBlockKeyHash(t *testing.T) {
	if h, ok := BlockKey("0x10").Hash(); !ok || h != 16 {
		t.Errorf("0x10 -> %d %v", h, ok)
	}
	if _, ok := BlockKey("abc123...").Hash(); ok {
		t.Error("seed placeholder key read as a hash")
	}
}

func TestTTLForms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{`300`, 300 * time.Second},
		{`1.5`, 1500 * time.Millisecond},
		{`"5m"`, 5 * time.Minute},
		{`"45"`, 45 * time.Second},
		{`0`, 0},
	} {
		var v TTL
		if err := json.Unmarshal([]byte(tc.in), &v); err != nil || v.Duration() != tc.want {
			t.Errorf("%s: got %v, %v", tc.in, v, err)
		}
	}
	for _, bad := range []string{`-1`, `"-5m"`, `"soon"`, `1e300`, `true`, `null`} {
		var v TTL
		if err := json.Unmarshal([]byte(bad), &v); !errors.Is(err, errcode.ErrInvalidTTL) {
			t.Errorf("%s: got %v, want invalid_ttl", bad, err)
		}
	}
}

func TestWorkerIDForms(t *testing.T) {
	for in, want := range map[string]WorkerID{`42`: "42", `"w-1"`: "w-1", `null`: "", `-3`: "-3"} {
		var w WorkerID
		if err := json.Unmarshal([]byte(in), &w); err != nil || w != want {
			t.Errorf("%s: got %q %v", in, w, err)
		}
	}
	for in, want := range map[WorkerID]string{"42": `42`, "007": `"007"`, "w": `"w"`} {
		out, _ := json.Marshal(in)
		if string(out) != want {
			t.Errorf("%q marshals to %s, want %s", in, out, want)
		}
	}
	var w WorkerID
	if err := json.Unmarshal([]byte(`1.5`), &w); !errors.Is(err, errcode.ErrBadRequest) {
		t.Errorf("1.5: %v", err)
	}
}

func TestSpanVerbsDecode(t *testing.T) {
	for _, tc := range []struct {
		json string
		want Directive
	}{
		{`{"type":"Splice","session":"s1","start":120,"end":480,"replacement":"[trimmed]","mode":"amortize"}`,
			Splice{Session: "s1", Start: 120, End: 480, Replacement: Replacement{Text: "[trimmed]"}, Mode: ModeAmortize}},
		{`{"type":"Splice","session":"s1","start":5,"end":5,"replacement":[1,2,3]}`,
			Splice{Session: "s1", Start: 5, End: 5, Replacement: Replacement{Tokens: []uint32{1, 2, 3}}}},
		{`{"type":"Splice","session":"s1","start":5,"end":9,"replacement":{"tokens":[7]},"mode":"forget"}`,
			Splice{Session: "s1", Start: 5, End: 9, Replacement: Replacement{Tokens: []uint32{7}}, Mode: ModeForget}},
		{`{"type":"Splice","session":"s1","start":5,"end":9,"replacement":null}`,
			Splice{Session: "s1", Start: 5, End: 9}},
		{`{"type":"Splice","session":"s1","start":5,"end":9,"recompute":{"first":64,"share":0.1,"max_kl":0.005}}`,
			Splice{Session: "s1", Start: 5, End: 9, Recompute: &Recompute{First: 64, Share: 0.1, MaxKL: 0.005}}},
		{`{"type":"Evict","session":"s1","start":900,"end":1400}`,
			Evict{Session: "s1", Start: 900, End: 1400}},
		{`{"type":"Pin","session":"s1","end":2048,"ttl":"10m"}`,
			Pin{Session: "s1", End: 2048, TTL: TTLOf(10 * time.Minute)}},
		{`{"type":"Retain","session":"s1","start":0,"end":4096,"priority":80,"duration":600}`,
			Retain{Session: "s1", Start: 0, End: 4096, Priority: 80, Duration: TTLOf(600 * time.Second)}},
		{`{"type":"Resume","lease_id":"session-abc"}`, Resume{LeaseID: "session-abc"}},
		{`{"type":"Share","session":"s1","end":2048,"scope":"tenant"}`, Share{Session: "s1", End: 2048, Scope: ScopeTenant}},
		{`{"type":"RenewLease","lease_id":"l","new_ttl_seconds":60}`, RenewLease{LeaseID: "l", NewTTL: TTL(time.Minute)}},
		{`{"type":"RevokeLease","lease_id":"l"}`, RevokeLease{LeaseID: "l"}},
		{`{"type":"Cache","block_hashes":["0x1"],"pin":true,"ttl_seconds":"30s"}`, Cache{BlockHashes: []Hash{1}, Pin: true, TTL: TTLOf(30 * time.Second)}},
	} {
		d, err := DecodeCommand([]byte(tc.json), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if !reflect.DeepEqual(d, tc.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", tc.json, d, tc.want)
		}
		out, _ := json.Marshal(d)
		back, err := DecodeCommand(out, Limits{})
		if err != nil || !reflect.DeepEqual(back, d) {
			t.Errorf("round trip %s -> %s -> %#v, %v", tc.json, out, back, err)
		}
	}
}

func TestDecodeRejections(t *testing.T) {
	big := `{"type":"Cache","block_hashes":[` + strings.Repeat("1,", 600000) + `1],"pin":true}`
	for _, tc := range []struct {
		json string
		code errcode.Code
	}{
		{``, errcode.BadRequest},
		{`   `, errcode.BadRequest},
		{`{`, errcode.BadRequest},
		{`{"type":"Warm"`, errcode.BadRequest},
		{`[]`, errcode.BadRequest},
		{`{"type":"Explode"}`, errcode.UnknownVerb},
		{`{"type":"warm","block_keys":["1"],"target_tier":"host"}`, errcode.UnknownVerb},
		{`{"type":7}`, errcode.BadRequest},
		{`{"block_hashes":[1]}`, errcode.MissingField},
		{`{"type":"Cache","block_hashes":[1],"pin":true,"pinn":true}`, errcode.BadRequest},
		{`{"type":"Cache","block_hashes":[1]}`, errcode.MissingField},
		{`{"type":"Cache","block_hashes":[1.5],"pin":true}`, errcode.InvalidHash},
		{`{"type":"Cache","block_hashes":"1","pin":true}`, errcode.BadRequest},
		{`{"type":"Cache","block_hashes":[1],"pin":"yes"}`, errcode.BadRequest},
		{`{"type":"Think","block_hashes":[1]}`, errcode.MissingField},
		{`{"type":"Prune"}`, errcode.MissingField},
		{`{"type":"Prune","after_block_hash":-1} {}`, errcode.BadRequest},
		{`{"type":"Pause","block_hashes":[1],"ttl_seconds":-5,"lease_id":"x"}`, errcode.InvalidTTL},
		{`{"type":"Pause","block_hashes":[1],"ttl_seconds":"forever","lease_id":"x"}`, errcode.InvalidTTL},
		{`{"type":"RenewLease","lease_id":"x"}`, errcode.MissingField},
		{`{"type":"Splice","session":"s","end":4}`, errcode.MissingField},
		{`{"type":"Splice","session":"s","start":0,"end":4,"replacement":{"tokens":[1],"text":"a"}}`, errcode.BadRequest},
		{`{"type":"Splice","session":"s","start":0,"end":4,"replacement":{"toks":[1]}}`, errcode.BadRequest},
		{`{"type":"Splice","session":"s","start":0,"end":4,"replacement":[-1]}`, errcode.BadRequest},
		{`{"type":"Splice","session":"s","start":0,"end":4,"replacement":7}`, errcode.BadRequest},
		{`{"type":"Splice","session":"s","start":0,"end":4,"recompute":{"firts":3}}`, errcode.BadRequest},
		{`{"type":"Splice","session":"s","start":0,"end":4,"recompute":7}`, errcode.BadRequest},
		{`{"type":"Retain","session":"s","start":0,"end":4}`, errcode.MissingField},
		{`{"type":"Evict","session":"s","start":0}`, errcode.MissingField},
		{big, errcode.PayloadTooLarge},
	} {
		_, err := DecodeCommand([]byte(tc.json), Limits{})
		e, ok := errcode.As(err)
		if !ok || e.Code != tc.code {
			name := tc.json
			if len(name) > 80 {
				name = name[:80]
			}
			t.Errorf("%s: got %v, want %s", name, err, tc.code)
		}
	}
}

func TestDecodeTurnForms(t *testing.T) {
	single := `{"type":"RevokeLease","lease_id":"l"}`
	arr := `[{"type":"RevokeLease","lease_id":"l"},{"type":"Prune","after_block_hash":3}]`
	env := `{"id":"t1","source":"harness","tenant":"acme","directives":` + arr + `}`
	for _, tc := range []struct {
		in   string
		want Turn
	}{
		{single, Turn{Directives: []Directive{RevokeLease{LeaseID: "l"}}}},
		{arr, Turn{Directives: []Directive{RevokeLease{LeaseID: "l"}, Prune{AfterBlockHash: 3}}}},
		{env, Turn{ID: "t1", Source: "harness", Tenant: "acme", Directives: []Directive{RevokeLease{LeaseID: "l"}, Prune{AfterBlockHash: 3}}}},
	} {
		got, err := DecodeTurn([]byte(tc.in), Limits{})
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, %v", tc.in, got, err)
		}
	}
	// A bad directive inside a turn names its index.
	_, err := DecodeTurn([]byte(`[{"type":"RevokeLease","lease_id":"l"},{"type":"Nope"}]`), Limits{})
	if e, ok := errcode.As(err); !ok || e.Code != errcode.UnknownVerb || e.Index != 1 {
		t.Errorf("got %v, want unknown_verb at index 1", err)
	}
	_, err = DecodeTurn([]byte(`{"directives":[],"extra":1}`), Limits{})
	if !errors.Is(err, errcode.ErrBadRequest) {
		t.Errorf("unknown envelope field: %v", err)
	}
	_, err = DecodeTurn([]byte(`[`+strings.Repeat(single+",", 3)+single+`]`), Limits{MaxDirectives: 3})
	if !errors.Is(err, errcode.ErrTooMany) {
		t.Errorf("too many: %v", err)
	}
	// A Turn embedded in other JSON decodes through UnmarshalJSON.
	var wrap struct{ T Turn }
	if err := json.Unmarshal([]byte(`{"T":`+env+`}`), &wrap); err != nil || wrap.T.Tenant != "acme" {
		t.Errorf("embedded turn: %#v %v", wrap, err)
	}
}

func TestCacheControlRejections(t *testing.T) {
	for _, tc := range []struct {
		json string
		code errcode.Code
	}{
		{`{"action":"pin_everything","block_hashes":[1]}`, errcode.UnknownVerb},
		{`{"block_hashes":[1]}`, errcode.MissingField},
		{`{"action":"pin_blocks"}`, errcode.MissingField},
		{`{"action":"pin_blocks","block_hashes":[1],"token_ids":[1]}`, errcode.BadRequest},
		{`{"action":"pin_prefix","block_hashes":[1]}`, errcode.BadRequest},
		{`{"action":"pin_prefix"}`, errcode.MissingField},
		{`{"action":"unpin_blocks","block_hashes":[1],"ttl_seconds":5}`, errcode.BadRequest},
		{`{"action":"pin_prefix","token_ids":[-1]}`, errcode.BadRequest},
		{`{"action":"pin_prefix","token_ids":[4294967296]}`, errcode.BadRequest},
		{`{"action":"pin_blocks","block_hashes":[1],"worker":1}`, errcode.BadRequest},
		{`{"action":"pin_blocks","block_hashes":[1],"worker_id":1.5}`, errcode.BadRequest},
	} {
		c, err := DecodeCacheControl([]byte(tc.json), Limits{})
		if err == nil {
			err = c.Validate(Limits{})
		}
		if e, ok := errcode.As(err); !ok || e.Code != tc.code {
			t.Errorf("%s: got %v, want %s", tc.json, err, tc.code)
		}
	}
	ok := `{"action":"pin_prefix","token_ids":[1,2,3],"ttl_seconds":"5m","dp_rank":0}`
	c, err := DecodeCacheControl([]byte(ok), Limits{})
	if err != nil || c.Validate(Limits{}) != nil || c.TTL.Duration() != 5*time.Minute {
		t.Errorf("%s: %#v %v", ok, c, err)
	}
}

func TestErrorReplyJSON(t *testing.T) {
	r := ErrorReply(errcode.New(errcode.UnknownBlock, "hash 7"), "42")
	out, _ := json.Marshal(r)
	want := `{"status":"error","message":"unknown_block: unknown block: hash 7","code":"unknown_block","worker_id":42}`
	if string(out) != want {
		t.Fatalf("got %s\nwant %s", out, want)
	}
}
