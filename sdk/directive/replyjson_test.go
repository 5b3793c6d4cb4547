package directive

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// replyOf builds a reply that reaches every field AppendJSON writes.
func replyOf(status, id, worker, warning, verb, lease, reason string, n int, tokens, ttl int64, shape uint8) TurnReply {
	r := TurnReply{Status: status, TurnID: id, WorkerID: WorkerID(worker), Warning: warning}
	if shape&1 != 0 {
		r.Error = errcode.New(errcode.BadRequest, "%s", warning)
		r.Error.Index = n
	}
	switch shape >> 1 & 3 {
	case 1:
		r.Results = []Result{}
	case 2, 3:
		for i := range int(shape>>3&3) + 1 {
			res := Result{Index: i, Verb: Verb(verb), Status: status,
				Effect: Effect{Blocks: n + i, Skipped: n, Missing: -n, Tokens: tokens, LeaseID: lease, TTL: TTL(ttl)}}
			if shape&32 != 0 {
				res.Effect.Skips = []Skip{{Reason: SkipReason(reason), Blocks: n}, {Reason: SkipLocked, Blocks: 1}}
			}
			if shape&64 != 0 {
				res.Error = errcode.New(errcode.Internal, "%s", reason)
			}
			r.Results = append(r.Results, res)
		}
	}
	return r
}

func FuzzReplyJSONAgrees(f *testing.F) {
	f.Add("ok", "turn-1", "7", "", "pin", "lease-1", "locked", 3, int64(64), int64(time.Minute), uint8(0x7f))
	f.Add("error", "", "w<1>", "disk full & \"slow\"", "splice", "", "pinned", 0, int64(0), int64(1500*time.Millisecond), uint8(0x25))
	f.Add("ok", "\u2028\xff", "-0", "\x00\t", "", "é", "\\", -1, int64(-5), int64(-time.Second), uint8(4))
	f.Add("ok", "", "", "", "warm", "", "", 0, int64(0), int64(0), uint8(2))
	f.Fuzz(func(t *testing.T, status, id, worker, warning, verb, lease, reason string, n int, tokens, ttl int64, shape uint8) {
		r := replyOf(status, id, worker, warning, verb, lease, reason, n, tokens, ttl, shape)
		want, werr := json.Marshal(r)
		got, gerr := r.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("json.Marshal error %v, AppendJSON error %v", werr, gerr)
		}
		if string(got) != string(want) {
			t.Fatalf("AppendJSON wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}

// FuzzReplyDecodeAgrees: whatever the scanner accepts, json.Unmarshal
// accepts too and decodes to the same reply; what it refuses still
// decodes, through json.Unmarshal.
func FuzzReplyDecodeAgrees(f *testing.F) {
	for _, shape := range []uint8{0, 2, 4, 0x14, 0x3c, 0x7f, 0x5c} {
		r := replyOf("ok", "t-1", "12", "careful", "pin", "l-1", "locked", 2, 64, int64(90*time.Second), shape)
		b, err := r.AppendJSON(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"status":"ok","results":[{"index":01,"verb":"pin","status":"ok","effect":{"blocks":1}}]}`))
	f.Add([]byte(`{"status":"ok","results":[],"worker_id":"w 1","warning":"x"}`))
	f.Add([]byte(`{"status":"ok","results":null} `))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanTurnReply(data)
		var want TurnReply
		werr := json.Unmarshal(data, &want)
		if ok && werr != nil {
			t.Fatalf("scanner accepted what json.Unmarshal refuses (%v): %q", werr, data)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("scanner decoded %+v, json.Unmarshal %+v, from %q", got, want, data)
		}
		viaAPI, err := DecodeTurnReply(data)
		if (err == nil) != (werr == nil) || (err == nil && !reflect.DeepEqual(viaAPI, want)) {
			t.Fatalf("DecodeTurnReply %+v %v, json.Unmarshal %+v %v", viaAPI, err, want, werr)
		}
	})
}

// The host's plain answers take the scanner, not the fallback.
func TestReplyScannerTakesHostAnswers(t *testing.T) {
	for _, shape := range []uint8{0, 2, 4, 0x14, 0x3c, 0x1c} {
		r := replyOf("ok", "t-1", "12", "careful", "pin", "l-1", "locked", 2, 64, int64(90*time.Second), shape)
		b, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := scanTurnReply(b)
		if !ok {
			t.Fatalf("shape %#x: scanner refused %s", shape, b)
		}
		var want TurnReply
		if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("shape %#x: %+v, json.Unmarshal %+v (%v)", shape, got, want, err)
		}
	}
}

// FuzzTurnJSONAgrees: Turn.AppendJSON writes what json.Marshal writes, for
// every seed command in every envelope.
func FuzzTurnJSONAgrees(f *testing.F) {
	f.Add("t-1", "router", "acme", uint8(3))
	f.Add("", "", "", uint8(0))
	f.Add("<id>", "a b", "é\x00", uint8(255))
	f.Fuzz(func(t *testing.T, id, source, tenant string, pick uint8) {
		turn := Turn{ID: id, Source: source, Tenant: tenant}
		if pick != 0 {
			turn.Directives = []Directive{}
			for i, c := range seedCommands {
				if pick&(1<<(i%8)) != 0 {
					turn.Directives = append(turn.Directives, c.want)
				}
			}
		}
		want, werr := json.Marshal(turn)
		got, gerr := turn.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) || string(got) != string(want) {
			t.Fatalf("AppendJSON %s (%v), json.Marshal %s (%v)", got, gerr, want, werr)
		}
	})
}
