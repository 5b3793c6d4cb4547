package plane

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvpilot/kvpilot/sdk/controlclient"
	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
	pb "github.com/kvpilot/kvpilot/sdk/proto/kvpilot/v1"
)

// request sends a raw payload on the worker subject and decodes the JSON
// answer generically.
func (e *env) request(t *testing.T, subject string, payload []byte) map[string]any {
	t.Helper()
	m, err := e.nc.Conn().Request(subject, payload, 5*time.Second)
	if err != nil {
		t.Fatalf("request %.80q: %v", payload, err)
	}
	var out map[string]any
	if err := json.Unmarshal(m.Data, &out); err != nil {
		t.Fatalf("answer to %.80q is not JSON: %q", payload, m.Data)
	}
	return out
}

// errorCode returns the registry code of a TurnReply or CacheControlReply
// answer, checking that it is a registered one.
func errorCode(t *testing.T, ans map[string]any) errcode.Code {
	t.Helper()
	if ans["status"] != "error" {
		return ""
	}
	var code string
	switch e := ans["error"].(type) {
	case map[string]any: // TurnReply: a full registry error
		code, _ = e["code"].(string)
		if e["message"] == "" || e["number"] == nil {
			t.Fatalf("error without message or number: %v", e)
		}
	default: // CacheControlReply: code beside the message
		code, _ = ans["code"].(string)
		if m, _ := ans["message"].(string); m == "" {
			t.Fatalf("cache_control error without a message: %v", ans)
		}
	}
	if _, ok := errcode.Lookup(errcode.Code(code)); !ok {
		t.Fatalf("error code %q is not in the registry: %v", code, ans)
	}
	return errcode.Code(code)
}

// The formats' published examples, byte for byte, decode: what stops them is only
// that their example hashes name no cached block.
func TestSeedJSONAcceptedVerbatim(t *testing.T) {
	e := newEnv(t)
	seeds := []string{
		`{"type": "Warm", "block_keys": ["abc123...", "def456..."], "target_tier": "CPU_TIER1"}`,
		`{"type": "Prune", "after_block_hash": 1234567890}`,
		`{"type": "Cache", "block_hashes": [111, 222, 333], "pin": true}`,
		`{"type": "Think", "block_hashes": [444, 555], "transient": true}`,
		`{"type": "Pause", "block_hashes": [666, 777], "ttl_seconds": 3600, "lease_id": "session-abc"}`,
		`{"type": "RenewLease", "lease_id": "session-abc", "new_ttl_seconds": 7200}`,
		`{"type": "RevokeLease", "lease_id": "session-abc"}`,
		"{\n    \"action\": \"pin_blocks\",\n    \"block_hashes\": [15310707395893867146, 15292316782987903195],\n    \"worker_id\": 42\n}",
	}
	for _, s := range seeds {
		ans := e.request(t, "kv-control-42", []byte(s))
		switch code := errorCode(t, ans); code {
		case "", errcode.UnknownBlock, errcode.UnknownLease:
		default:
			t.Errorf("%s: refused with %s: %v", s, code, ans)
		}
		if strings.Contains(s, "action") {
			if w, isNum := ans["worker_id"].(float64); !isNum || w != 42 {
				t.Errorf("cache_control reply worker_id %v, want the number 42", ans["worker_id"])
			}
		}
	}
	// The same formats with hashes the host has (signed int64, as the
	// AgenticCommand's i64 fields carry them) are applied.
	h := e.commit("", toks(0, 8)).Sequence
	signed := func(u uint64) string { return fmt.Sprint(int64(u)) }
	for _, s := range []string{
		`{"type": "Pause", "block_hashes": [` + signed(h[0]) + `, ` + signed(h[1]) + `], "ttl_seconds": 3600, "lease_id": "session-abc"}`,
		`{"type": "RenewLease", "lease_id": "session-abc", "new_ttl_seconds": 7200}`,
		`{"type": "RevokeLease", "lease_id": "session-abc"}`,
	} {
		if ans := e.request(t, "kv-control-42", []byte(s)); ans["status"] != "ok" {
			t.Fatalf("%s: %v", s, ans)
		}
	}
	h = e.commit("", toks(100, 8)).Sequence
	ans := e.request(t, "kv-control-broadcast", []byte(fmt.Sprintf(`{"action": "pin_blocks", "block_hashes": [%d, %d], "worker_id": 42}`, h[0], h[1])))
	if ans["status"] != "ok" || ans["pinned_count"] != 2.0 || ans["message"] != "Pinned 2/2 blocks" {
		t.Fatalf("pin_blocks over broadcast: %v", ans)
	}
	// On the broadcast subject, a request for another worker is not ours:
	// no answer at all (the named worker answers).
	if _, err := e.nc.Conn().Request("kv-control-broadcast", []byte(`{"action":"pin_blocks","block_hashes":[1],"worker_id":7}`), 200*time.Millisecond); err == nil {
		t.Fatal("answered a broadcast cache_control for worker 7")
	}
	// On the worker subject it is an error the sender should see.
	if code := errorCode(t, e.request(t, "kv-control-42", []byte(`{"action":"pin_blocks","block_hashes":[1],"worker_id":7}`))); code != errcode.WrongWorker {
		t.Fatalf("wrong worker: %s", code)
	}
}

func TestHostilePayloadsChangeNothing(t *testing.T) {
	e := newEnv(t)
	h := e.commit("", toks(0, 12)).Sequence
	snap := e.snapshot("", h...)
	big := `{"type":"Cache","pin":true,"block_hashes":[` + strings.Repeat("1,", 600000) + `1]}`
	payloads := []string{
		``, ` `, `null`, `42`, `"Cache"`, `{`, `}`, `[`, `{"type":`, `{"type":"Cache"`,
		`{"type":"cache","block_hashes":[1],"pin":true}`,
		`{"type":"Nuke","everything":true}`,
		`{"type":"Cache","block_hashes":[1],"pin":true,"extra":1}`,
		`{"type":"Cache","block_hashes":[1]}`,
		`{"type":"Cache","block_hashes":"1","pin":true}`,
		`{"type":"Cache","block_hashes":[1e400],"pin":true}`,
		`{"type":"Cache","block_hashes":[18446744073709551616],"pin":true}`,
		`{"type":"Cache","block_hashes":[-9223372036854775809],"pin":true}`,
		`{"type":"Cache","block_hashes":[1],"pin":true,"ttl_seconds":-5}`,
		`{"type":"Cache","block_hashes":[1],"pin":true,"ttl_seconds":"forever"}`,
		`{"type":"Cache","block_hashes":[1],"pin":true} {"type":"Prune","after_block_hash":1}`,
		`{"type":"Pause","block_hashes":[1],"lease_id":""}`,
		`{"type":"Pause","block_hashes":[1],"lease_id":"` + strings.Repeat("x", 5000) + `"}`,
		"{\"type\":\"Pause\",\"block_hashes\":[1],\"lease_id\":\"a\x00b\"}",
		"{\"type\":\"Cache\",\"block_hashes\":[1],\"pin\":true\xff}",
		`{"type":"Splice","session":"s","start":9,"end":2}`,
		`{"type":"Retain","session":"s","start":0,"end":4,"priority":1000}`,
		`{"directives":[]}`,
		`{"directives":[{"type":"Cache","block_hashes":[1],"pin":true}],"tenant":"` + strings.Repeat("t", 300) + `"}`,
		`[` + strings.Repeat(`{"type":"RevokeLease","lease_id":"x"},`, 300) + `{"type":"RevokeLease","lease_id":"x"}]`,
		strings.Repeat(`[`, 100000) + strings.Repeat(`]`, 100000),
		`{"type":"Prune","after_block_hash":{"$gt":0}}`,
		`{"action":"pin_blocks","type":"Cache","block_hashes":[1],"pin":true}`,
		`{"action":"drop_tables"}`,
		`{"action":"pin_blocks"}`,
		`{"action":"pin_prefix","token_ids":[-1]}`,
		`{"action":"pin_blocks","block_hashes":[1],"token_ids":[1]}`,
		`{"action":"unpin_blocks","block_hashes":[1],"ttl_seconds":5}`,
		`{"action":"pin_blocks","block_hashes":[1],"worker_id":{"id":1}}`,
		big,
	}
	for _, p := range payloads {
		ans := e.request(t, "kv-control-42", []byte(p))
		code := errorCode(t, ans)
		if code == "" || code == errcode.Internal {
			t.Errorf("%.60q: answered %v", p, ans)
		}
	}
	if got := e.snapshot("", h...); got != snap {
		t.Fatalf("hostile payloads changed the index:\n%s\n%s", snap, got)
	}
	if code := errorCode(t, e.request(t, "kv-control-42", []byte(big))); code != errcode.PayloadTooLarge {
		t.Fatalf("oversized payload: %s", code)
	}

	// The socket: a message over the size limit is refused by gRPC, a
	// directive with no verb and an invalid duration are refused turns.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	huge := &pb.ApplyRequest{Directives: []*pb.Directive{{Verb: &pb.Directive_Cache{Cache: &pb.Cache{BlockHashes: make([]uint64, 200000), Pin: true}}}}}
	if _, err := e.uds.RPC().Apply(ctx, huge); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized gRPC message: %v", err)
	}
	many := &pb.ApplyRequest{Directives: []*pb.Directive{{Verb: &pb.Directive_Cache{Cache: &pb.Cache{BlockHashes: make([]uint64, 70000), Pin: true}}}}}
	for _, tc := range []struct {
		req  *pb.ApplyRequest
		code errcode.Code
	}{
		{&pb.ApplyRequest{Directives: []*pb.Directive{{}}}, errcode.UnknownVerb},
		{&pb.ApplyRequest{Directives: []*pb.Directive{{Verb: &pb.Directive_Pin{Pin: &pb.Pin{Session: "s", End: 4, Ttl: &durationpb.Duration{Seconds: -1}}}}}}, errcode.InvalidTTL},
		{&pb.ApplyRequest{}, errcode.MissingField},
		{many, errcode.TooMany},
	} {
		resp, err := e.uds.RPC().Apply(ctx, tc.req)
		if err != nil || resp.GetOk() || resp.GetError().GetCode() != string(tc.code) {
			t.Errorf("%s: %v %v", tc.code, resp, err)
		}
	}
	r, err := e.uds.RPC().CacheControl(ctx, &pb.CacheControlRequest{Action: "drop_tables"})
	if err != nil || r.GetStatus() != directive.StatusError || r.GetError().GetCode() != string(errcode.UnknownVerb) {
		t.Fatalf("unknown action over the socket: %v %v", r, err)
	}
	if got := e.snapshot("", h...); got != snap {
		t.Fatalf("hostile socket requests changed the index:\n%s\n%s", snap, got)
	}
	// And the host still works.
	ok(t, apply(t, e.uds, "", directive.Cache{BlockHashes: hs(h[2]), Pin: true}))
}

func TestOneInvalidDirectiveChangesNothing(t *testing.T) {
	transports(t, func(t *testing.T, e *env, c controlclient.Client) {
		a := e.commit("", toks(0, 12)).Sequence
		b := e.commit("", toks(100, 8)).Sequence
		snap := e.snapshot("", append(a, b...)...)
		// Valid directives first; the last names no cached block.
		r := apply(t, c, "",
			directive.Cache{BlockHashes: hs(a[2]), Pin: true},
			directive.Think{BlockHashes: hs(b[1]), Transient: true},
			directive.Pause{BlockHashes: hs(b[0]), LeaseID: "L"},
			directive.Cache{BlockHashes: hs(999), Pin: true},
		)
		refused(t, r, 3, errcode.UnknownBlock)
		for i := 0; i < 3; i++ {
			if r.Results[i].Error == nil || r.Results[i].Error.Code != errcode.TurnAborted {
				t.Errorf("result %d: %+v, want turn_aborted", i, r.Results[i])
			}
		}
		// Invalid on its own (a priority out of range), after a valid pin.
		refused(t, apply(t, c, "",
			directive.Cache{BlockHashes: hs(a[2]), Pin: true},
			directive.Retain{Session: "s", Start: 0, End: 4, Priority: 500},
		), 1, errcode.InvalidPriority)
		if got := e.snapshot("", append(a, b...)...); got != snap {
			t.Fatalf("refused turn changed the index:\n%s\n%s", snap, got)
		}
		if _, found := e.lease("L"); found {
			t.Fatal("refused turn left a lease")
		}
	})
}
